//! Session manager — metrics (SPEC.md MGR-48), read with a thread-local debugging
//! recorder (the test runtime is single-threaded, so every task records into it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use knife_runtime::sessions::metrics::*;
use knife_runtime::*;
use knife_testkit::sessions::FakeBehaviour;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use support::*;

type Metric = (String, Vec<(String, String)>, DebugValue);

/// (name, sorted labels) → value of every metric recorded.
fn snapshot(snapshotter: &metrics_util::debugging::Snapshotter) -> Vec<Metric> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<_> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            (key.name().to_owned(), labels, value)
        })
        .collect()
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<_> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    v.sort();
    v
}

fn counter(all: &[Metric], name: &str, pairs: &[(&str, &str)]) -> u64 {
    let wanted = labels(pairs);
    all.iter()
        .find_map(|(n, l, v)| match v {
            DebugValue::Counter(c) if n == name && *l == wanted => Some(*c),
            _ => None,
        })
        .unwrap_or(0)
}

#[tokio::test(start_paused = true)]
async fn mgr_48_session_and_turn_metrics_have_the_spec_names_and_labels() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);

    let h = Harness::new(
        FakeBehaviour {
            on_start_turn: Some(Arc::new(|input: StartTurnInput| {
                async move {
                    if input.text == "hang" {
                        std::future::pending::<()>().await;
                    }
                    if input.text == "refuse" {
                        return Err(AdapterError::Busy("busy".into()));
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    Ok(())
                }
                .boxed()
            })),
            ..Default::default()
        },
        |o| o.idle_timeout = Duration::from_secs(3600),
    )
    .await;
    let t = h.thread().await;
    let handle = h.open(&exclusive(&t), &t).await;
    handle.start_turn(turn(&t, 1)).await.unwrap();
    let mut refused = turn(&t, 2);
    refused.text = "refuse".into();
    assert!(handle.start_turn(refused).await.is_err());
    let mut hanging = turn(&t, 3);
    hanging.text = "hang".into();
    let h2 = handle.clone();
    let cancelled = tokio::spawn(async move { h2.start_turn(hanging).await });
    settle().await;
    cancelled.abort();
    let _ = cancelled.await;
    handle
        .steer_turn(
            &t,
            SteerInput {
                run_id: knife_protocol::RunId::from("run:t:1"),
                item_id: knife_protocol::TurnItemId::from("item:steer"),
                text: "more".into(),
            },
        )
        .await
        .unwrap();
    handle
        .respond_to_runtime_request(
            &knife_protocol::RuntimeRequestId::from("request_1"),
            knife_protocol::RequestAnswer {
                decision: knife_protocol::ApprovalDecision::AllowOnce,
                message: None,
            },
        )
        .await
        .unwrap();
    handle
        .interrupt_turn(&t, InterruptReason::User)
        .await
        .unwrap();
    h.manager.close(&exclusive(&t)).await.unwrap();

    let all = snapshot(&snapshotter);
    let open = [
        ("provider", "fake"),
        ("operation", "open"),
        ("outcome", "success"),
    ];
    assert_eq!(counter(&all, SESSIONS_TOTAL, &open), 1);
    let release = [
        ("provider", "fake"),
        ("operation", "release"),
        ("reason", "manual_shutdown"),
        ("outcome", "success"),
    ];
    assert_eq!(counter(&all, SESSIONS_TOTAL, &release), 1);
    let turns = |op: &'static str, outcome: &'static str| {
        counter(
            &all,
            TURNS_TOTAL,
            &[
                ("provider", "fake"),
                ("operation", op),
                ("modelFamily", "gpt"),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(turns("send", "success"), 1);
    assert_eq!(turns("send", "failure"), 1);
    assert_eq!(turns("send", "interrupt"), 1, "a cancelled start");
    assert_eq!(turns("steer", "success"), 1);
    assert_eq!(turns("interrupt", "success"), 1);
    assert_eq!(turns("runtime-request-response", "success"), 1);
    let durations: Vec<_> = all
        .iter()
        .filter_map(|(n, l, v)| match v {
            DebugValue::Histogram(values) if n == TURN_DURATION_SECONDS => Some((l, values)),
            _ => None,
        })
        .collect();
    assert_eq!(durations.len(), 1);
    assert_eq!(
        *durations[0].0,
        labels(&[("provider", "fake"), ("operation", "send")])
    );
    let seconds: Vec<f64> = durations[0].1.iter().map(|v| v.into_inner()).collect();
    assert_eq!(seconds.len(), 1, "only accepted turns are timed");
    assert!((seconds[0] - 0.25).abs() < 0.01, "{seconds:?}");
}

#[test]
fn mgr_48_model_family_label() {
    assert_eq!(model_family(Some("GPT-5.4")), Some("gpt"));
    assert_eq!(model_family(Some("claude-sonnet")), Some("claude"));
    assert_eq!(model_family(Some("gemini-2")), Some("gemini"));
    assert_eq!(model_family(Some("qwen")), Some("other"));
    assert_eq!(model_family(Some("")), None);
    assert_eq!(model_family(None), None);
}
