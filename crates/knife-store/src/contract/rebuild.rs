// Property test: for random event sequences, `rebuild` (fold of the whole log)
// reproduces exactly the projections `write` built incrementally, batch by batch.

use super::StoreFactory;
use super::fixtures::*;
use crate::Store;
use knife_protocol::*;
use proptest::prelude::*;
use std::collections::BTreeSet;

const RUN_STATUSES: [RunStatus; 4] = [
    RunStatus::Queued,
    RunStatus::Running,
    RunStatus::Completed,
    RunStatus::Failed,
];
const NODE_STATUSES: [NodeStatus; 3] = [
    NodeStatus::Pending,
    NodeStatus::Running,
    NodeStatus::Completed,
];
const SESSION_STATUSES: [SessionStatus; 3] = [
    SessionStatus::Starting,
    SessionStatus::Ready,
    SessionStatus::Stopped,
];
const TURN_STATUSES: [ProviderTurnStatus; 3] = [
    ProviderTurnStatus::Running,
    ProviderTurnStatus::Completed,
    ProviderTurnStatus::Interrupted,
];
const REQUEST_STATUSES: [RuntimeRequestStatus; 3] = [
    RuntimeRequestStatus::Pending,
    RuntimeRequestStatus::Resolved,
    RuntimeRequestStatus::Expired,
];

/// One random event over a small universe of ids (so upserts collide often).
#[derive(Clone, Debug)]
pub enum Op {
    Project {
        p: u8,
        at: i64,
    },
    Thread {
        t: u8,
        p: u8,
        at: i64,
    },
    Run {
        t: u8,
        ordinal: u32,
        status: usize,
    },
    Node {
        t: u8,
        run: u32,
        n: u32,
        status: usize,
    },
    Attach {
        s: u8,
        t: u8,
        status: usize,
    },
    Update {
        s: u8,
        t: Option<u8>,
        status: usize,
    },
    Detach {
        s: u8,
        t: Option<u8>,
    },
    ProviderThread {
        id: u8,
        t: u8,
        last_run: Option<u32>,
    },
    ProviderTurn {
        t: u8,
        run: u32,
        attempt: u32,
        status: usize,
    },
    Request {
        id: u8,
        t: u8,
        status: usize,
    },
    Item {
        t: u8,
        run: u32,
        n: u64,
        text: String,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let t = 0_u8..3;
    prop_oneof![
        (0_u8..2, 0_i64..50).prop_map(|(p, at)| Op::Project { p, at }),
        (t.clone(), 0_u8..2, 0_i64..50).prop_map(|(t, p, at)| Op::Thread { t, p, at }),
        (t.clone(), 1_u32..3, 0..RUN_STATUSES.len()).prop_map(|(t, ordinal, status)| Op::Run {
            t,
            ordinal,
            status
        }),
        (t.clone(), 1_u32..3, 0_u32..3, 0..NODE_STATUSES.len())
            .prop_map(|(t, run, n, status)| Op::Node { t, run, n, status }),
        (0_u8..3, t.clone(), 0..SESSION_STATUSES.len()).prop_map(|(s, t, status)| Op::Attach {
            s,
            t,
            status
        }),
        (
            0_u8..3,
            proptest::option::of(0_u8..3),
            0..SESSION_STATUSES.len()
        )
            .prop_map(|(s, t, status)| Op::Update { s, t, status }),
        (0_u8..3, proptest::option::of(0_u8..3)).prop_map(|(s, t)| Op::Detach { s, t }),
        (0_u8..2, t.clone(), proptest::option::of(1_u32..4))
            .prop_map(|(id, t, last_run)| Op::ProviderThread { id, t, last_run }),
        (t.clone(), 1_u32..3, 1_u32..3, 0..TURN_STATUSES.len()).prop_map(
            |(t, run, attempt, status)| Op::ProviderTurn {
                t,
                run,
                attempt,
                status
            }
        ),
        (0_u8..3, t.clone(), 0..REQUEST_STATUSES.len()).prop_map(|(id, t, status)| Op::Request {
            id,
            t,
            status
        }),
        (t, 1_u32..3, 0_u64..4, "[a-z]{0,8}").prop_map(|(t, run, n, text)| Op::Item {
            t,
            run,
            n,
            text
        }),
    ]
}

fn th(t: u8) -> String {
    format!("thread{t}")
}

fn sid(s: u8) -> String {
    format!("psession{s}")
}

fn to_event(op: &Op) -> DomainEvent {
    match op.clone() {
        Op::Project { p, at } => ev(EventBody::ProjectUpdated(project(
            &format!("project{p}"),
            at,
        ))),
        Op::Thread { t, p, at } => {
            // Claims and parents vary with the generated values, so rebuild must
            // reproduce the claim columns too (migration 0003).
            let mut thread = thread(&th(t), &format!("project{p}"), at);
            if at % 3 == 0 {
                thread.claim(ts(at));
                thread.resume_attempts = u32::try_from(at % 4).unwrap_or(0);
            }
            if t % 2 == 1 {
                thread.parent_thread_id = Some(ThreadId::from(th(t - 1).as_str()));
            }
            ev(EventBody::ThreadUpdated(thread))
        }
        Op::Run { t, ordinal, status } => ev(EventBody::RunUpdated(run(
            &th(t),
            ordinal,
            RUN_STATUSES[status],
        ))),
        Op::Node { t, run, n, status } => ev(EventBody::NodeUpdated(node(
            &th(t),
            run,
            n,
            NODE_STATUSES[status],
        ))),
        Op::Attach { s, t, status } => ev_on(
            &th(t),
            EventBody::ProviderSessionAttached(session(&sid(s), SESSION_STATUSES[status])),
        ),
        Op::Update { s, t, status } => {
            let mut e = ev(EventBody::ProviderSessionUpdated(session(
                &sid(s),
                SESSION_STATUSES[status],
            )));
            e.thread_id = t.map(|t| ThreadId::from(th(t)));
            e
        }
        Op::Detach { s, t } => {
            let mut e = ev(EventBody::ProviderSessionDetached {
                provider_session_id: ProviderSessionId::from(sid(s)),
                detached_at: ts(5),
                reason: Some("test".into()),
            });
            e.thread_id = t.map(|t| ThreadId::from(th(t)));
            e
        }
        Op::ProviderThread { id, t, last_run } => ev(EventBody::ProviderThreadUpdated(
            provider_thread(&format!("pthread{id}"), &th(t), last_run),
        )),
        Op::ProviderTurn {
            t,
            run,
            attempt,
            status,
        } => ev(EventBody::ProviderTurnUpdated(provider_turn(
            &th(t),
            run,
            attempt,
            TURN_STATUSES[status],
        ))),
        Op::Request { id, t, status } => ev(EventBody::RuntimeRequestUpdated(runtime_request(
            &format!("request{id}"),
            &th(t),
            REQUEST_STATUSES[status],
        ))),
        Op::Item { t, run, n, text } => {
            ev(EventBody::TurnItemUpdated(turn_item(&th(t), run, n, &text)))
        }
    }
}

/// The bindings the rules imply: attach binds (session, event thread), detach
/// unbinds it, update never touches bindings.
fn expected_bindings(batches: &[Vec<Op>]) -> BTreeSet<(String, String)> {
    let mut set = BTreeSet::new();
    for op in batches.iter().flatten() {
        match op {
            Op::Attach { s, t, .. } => {
                set.insert((sid(*s), th(*t)));
            }
            Op::Detach { s, t: Some(t) } => {
                set.remove(&(sid(*s), th(*t)));
            }
            _ => {}
        }
    }
    set
}

/// One case: writes `batches`, rebuilds, and compares with the incremental state.
pub async fn check(factory: &dyn StoreFactory, batches: Vec<Vec<Op>>) {
    let (_dir, store) = temp_store(factory).await;
    let events: Vec<Vec<DomainEvent>> = batches
        .iter()
        .map(|b| b.iter().map(to_event).collect())
        .collect();
    for batch in &events {
        store.write(batch.clone()).await.unwrap();
    }
    let incremental = store.dump_projections().await.unwrap();
    let projections = thread_projections(&store).await;

    let stats = store.rebuild().await.unwrap();
    assert_eq!(
        stats.events,
        events.iter().map(|b| b.len() as u64).sum::<u64>()
    );
    let rebuilt = store.dump_projections().await.unwrap();
    assert_eq!(
        rebuilt, incremental,
        "rebuild differs from the incremental projections"
    );
    assert_eq!(thread_projections(&store).await, projections);

    // Batching does not matter either: the same events one per write.
    let (_dir2, single) = temp_store(factory).await;
    for e in events.iter().flatten() {
        single.write(vec![e.clone()]).await.unwrap();
    }
    assert_eq!(single.dump_projections().await.unwrap(), incremental);

    // And the binding rules hold.
    let bindings: BTreeSet<(String, String)> = incremental["provider_session_bindings"]
        .iter()
        .map(|row| {
            (
                row["provider_session_id"].as_str().unwrap().to_owned(),
                row["thread_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(bindings, expected_bindings(&batches));
}

async fn thread_projections(store: &Store) -> Vec<Option<ThreadProjection>> {
    let mut out = Vec::new();
    for t in 0..3 {
        out.push(
            store
                .thread_projection(&ThreadId::from(th(t)))
                .await
                .unwrap(),
        );
    }
    out
}

/// The generator of the property: 1..16 batches of 1..5 random operations.
pub fn batches() -> impl Strategy<Value = Vec<Vec<Op>>> {
    proptest::collection::vec(proptest::collection::vec(op(), 1..5), 1..16)
}

/// Runs [`check`] for `batches` on a fresh current-thread runtime (proptest cases are
/// synchronous).
pub fn run_check(factory: &dyn StoreFactory, batches: Vec<Vec<Op>>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(check(factory, batches));
}
