//! `thread.status` events set the thread projection's `agent_status` (PROC-06);
//! `thread.error` events are stored and streamed but change no projection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use knife_protocol::*;
use knife_store::EntityKind;

fn status_event(thread: &ThreadId, status: AgentStatus) -> DomainEvent {
    DomainEvent::new(
        ts(5),
        EventBody::ThreadStatusChanged {
            thread_id: thread.clone(),
            run_id: None,
            status,
        },
    )
}

#[tokio::test]
async fn proc_06_thread_status_events_set_the_threads_agent_status() {
    let (_dir, store) = temp_store().await;
    let t = thread("t1", "p1", 1);
    store
        .write(vec![
            DomainEvent::new(ts(0), EventBody::ProjectCreated(project("p1", 0))),
            DomainEvent::new(ts(1), EventBody::ThreadCreated(t.clone())),
        ])
        .await
        .unwrap();
    assert_eq!(
        store.get_thread(&t.id).await.unwrap().unwrap().agent_status,
        None
    );
    let v0 = store
        .row_version(EntityKind::Thread, t.id.as_str())
        .await
        .unwrap();

    let retry = AgentStatus::Retry {
        attempt: 1,
        message: "Too Many Requests".into(),
        next: ts(7),
    };
    let written = store
        .write(vec![
            status_event(&t.id, AgentStatus::Busy),
            status_event(&t.id, retry.clone()),
            DomainEvent::new(
                ts(6),
                EventBody::ThreadErrorRaised {
                    thread_id: t.id.clone(),
                    run_id: None,
                    error: AgentError {
                        name: "UnknownError".into(),
                        message: "no_kv_space".into(),
                    },
                },
            ),
        ])
        .await
        .unwrap();
    assert_eq!(written[0].event.event_type(), "thread.status");
    assert_eq!(written[2].event.event_type(), "thread.error");
    assert_eq!(written[2].event.thread_id.as_ref(), Some(&t.id));
    let read = store.get_thread(&t.id).await.unwrap().unwrap();
    assert_eq!(read.agent_status, Some(retry));
    assert_eq!(read.title, t.title, "the rest of the thread is untouched");
    let v1 = store
        .row_version(EntityKind::Thread, t.id.as_str())
        .await
        .unwrap();
    assert_eq!(v1, v0.map(|v| v + 2));

    // A status for a thread not in the table changes nothing and fails nothing.
    store
        .write(vec![status_event(
            &ThreadId::from("ghost"),
            AgentStatus::Idle,
        )])
        .await
        .unwrap();
    assert!(
        store
            .get_thread(&ThreadId::from("ghost"))
            .await
            .unwrap()
            .is_none()
    );

    // Rebuild gives the same projection.
    let before = store.dump_projections().await.unwrap();
    store.rebuild().await.unwrap();
    assert_eq!(store.dump_projections().await.unwrap(), before);
}
