//! Session manager — the stuck-turn watchdog (`turn_stall_timeout`; beyond the reference).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use futures::StreamExt;
use knife_protocol::*;
use knife_runtime::sessions::*;
use knife_testkit::sessions::FakeBehaviour;
use support::*;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[tokio::test(start_paused = true)]
async fn a_turn_silent_past_the_stall_limit_is_interrupted_and_failed() {
    let h = Harness::new(FakeBehaviour::default(), |o| {
        o.turn_stall_timeout = secs(5);
    })
    .await;
    let t = h.thread().await;
    let handle = h.open(&exclusive(&t), &t).await;
    let mut events = handle.subscribe_events();
    let input = turn(&t, 1);
    handle.start_turn(input.clone()).await.unwrap();
    tokio::time::sleep(secs(3)).await;
    // Progress at 3 s moves the deadline to 8 s.
    let item = assistant_item(&t, 1, "working");
    h.adapter
        .session(&exclusive(&t))
        .unwrap()
        .push(AdapterEvent::TurnItemUpdated(item.clone()));
    assert_eq!(
        events.next().await.unwrap().unwrap(),
        AdapterEvent::TurnItemUpdated(item)
    );
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert_eq!(h.adapter.state().interrupt_count(), 0, "not stalled yet");
    tokio::time::sleep(secs(1)).await;
    assert_eq!(h.adapter.state().interrupt_count(), 1);
    match events.next().await.unwrap().unwrap() {
        AdapterEvent::TurnTerminal {
            provider_turn_id,
            outcome: TurnOutcome::Failed { error },
            ..
        } => {
            assert_eq!(provider_turn_id, input.provider_turn_id);
            assert_eq!(error.error_type, STALLED_ERROR_TYPE);
            assert!(
                error.message.contains("Send the message again"),
                "{}",
                error.message
            );
        }
        other => panic!("expected a failed terminal, got {other:?}"),
    }
    // The turn counts as ended: the session idles out one window later.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(!h.manager.is_live(&exclusive(&t)));
}

#[tokio::test(start_paused = true)]
async fn the_stall_watchdog_is_off_when_its_limit_is_zero() {
    let h = Harness::new(FakeBehaviour::default(), |o| {
        o.turn_stall_timeout = Duration::ZERO;
    })
    .await;
    let t = h.thread().await;
    let handle = h.open(&exclusive(&t), &t).await;
    handle.start_turn(turn(&t, 1)).await.unwrap();
    tokio::time::sleep(secs(3600)).await;
    assert!(h.manager.is_live(&exclusive(&t)));
    assert_eq!(h.adapter.state().interrupt_count(), 0);
}

/// A stalled turn whose runtime does not even answer the interrupt: the interrupt is
/// time-boxed (`INTERRUPT_TIMEOUT`), the synthetic terminal still goes out, and the
/// unresponsive exclusive session is released with status `error`.
#[tokio::test(start_paused = true)]
async fn a_stalled_turn_whose_runtime_ignores_the_interrupt_is_ended_and_released() {
    let h = Harness::new(
        FakeBehaviour {
            interrupt_hangs: true,
            ..Default::default()
        },
        |o| {
            o.turn_stall_timeout = secs(5);
            o.idle_timeout = secs(3600);
        },
    )
    .await;
    let t = h.thread().await;
    let handle = h.open(&exclusive(&t), &t).await;
    let mut events = handle.subscribe_events();
    handle.start_turn(turn(&t, 1)).await.unwrap();
    tokio::time::sleep(secs(5) + INTERRUPT_TIMEOUT + secs(1)).await;
    assert_eq!(h.adapter.state().interrupt_count(), 1);
    match tokio::time::timeout(secs(60), events.next()).await {
        Ok(Some(Ok(AdapterEvent::TurnTerminal {
            outcome: TurnOutcome::Failed { error },
            ..
        }))) => assert_eq!(error.error_type, STALLED_ERROR_TYPE),
        other => panic!("expected the stalled terminal, got {other:?}"),
    }
    wait_until(secs(5), "the unresponsive session's release", || {
        !h.manager.is_live(&exclusive(&t))
    })
    .await;
    wait_until_async(secs(5), "the error status", || async {
        h.session_status(&exclusive(&t)).await == Some(SessionStatus::Error)
    })
    .await;
}
