//! Thread lifecycle (SPEC.md CHG-08): rename, archive, delete (session released, MCP
//! credential revoked, pending requests cancelled, tombstone, projections dropped,
//! rebuild agrees), automatic titles, fork (CHG-09) — over a real SQLite store under
//! paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::support;

use knife_protocol::*;
use knife_runtime::*;
use knife_store::StreamFilter;
use knife_testkit::sessions::FakeBehaviour;

/// Every projection row (any table) that names `thread`.
async fn rows_of(store: &knife_store::Store, thread: &ThreadId) -> Vec<String> {
    let dump = store.dump_projections().await.unwrap();
    let mut out = Vec::new();
    for (table, rows) in dump {
        for row in rows {
            if row.get("thread_id").and_then(|v| v.as_str()) == Some(thread.as_str())
                || row.get("id").and_then(|v| v.as_str()) == Some(thread.as_str())
            {
                out.push(format!("{table}: {row}"));
            }
        }
    }
    out
}

// Real time: the forced delete waits (time-boxed) for the stopped run's terminal,
// which the store's writer thread commits; paused time would race that box.
#[tokio::test]
async fn chg_08_delete_refuses_while_a_run_is_active_and_force_stops_it_first() {
    let h = common::Harness::new(common::Drain::Hang).await;
    let exec = h.execution();
    let thread = h.thread(None).await;
    let run = exec
        .start_run(&thread, "work forever".into())
        .await
        .unwrap();
    h.drains.wait_started(1).await;

    let refused = exec.delete_thread(&thread, false).await.unwrap_err();
    assert!(
        matches!(&refused, RuntimeError::ActiveRunRefuses { run: r, .. } if *r == run.id),
        "{refused:?}"
    );
    let text = refused.to_string();
    assert!(
        text.contains("force"),
        "the refusal says what to do: {text}"
    );
    assert!(h.store.get_thread(&thread).await.unwrap().is_some());
    assert!(exec.is_active(&thread), "the run still runs");

    let deleted = exec.delete_thread(&thread, true).await.unwrap();
    assert_eq!(deleted.stopped_run_id.as_ref(), Some(&run.id));
    assert!(!exec.is_active(&thread));
    assert!(h.store.get_thread(&thread).await.unwrap().is_none());
    // The run was recorded interrupted before the tombstone.
    let events = h
        .store
        .read_events(&StreamFilter::thread(thread.clone(), 0), 10_000)
        .await
        .unwrap();
    let interrupted = events.iter().position(
        |e| matches!(&e.event.body, EventBody::RunUpdated(r) if r.status == RunStatus::Interrupted),
    );
    let tombstone = events
        .iter()
        .position(|e| matches!(e.event.body, EventBody::ThreadDeleted { .. }));
    assert!(
        interrupted.is_some() && tombstone.is_some() && interrupted < tombstone,
        "run interrupted ({interrupted:?}) before the tombstone ({tombstone:?})"
    );
}

#[tokio::test(start_paused = true)]
async fn chg_08_delete_records_a_tombstone_and_drops_the_thread_also_after_rebuild() {
    let h = common::Harness::new(common::Drain::Complete).await;
    let exec = h.execution();
    let keep = h.thread(None).await;
    let gone = h.thread(None).await;
    for t in [&keep, &gone] {
        exec.start_run(t, "hello".into()).await.unwrap();
        exec.await_idle(t).await;
    }
    assert!(!rows_of(&h.store, &gone).await.is_empty());
    let deleted = exec.delete_thread(&gone, false).await.unwrap();
    assert_eq!(deleted.thread_id, gone);
    assert_eq!(deleted.stopped_run_id, None);

    assert!(h.store.thread_projection(&gone).await.unwrap().is_none());
    let listed: Vec<ThreadId> = h
        .store
        .list_threads(None)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(listed, vec![keep.clone()]);
    assert_eq!(rows_of(&h.store, &gone).await, Vec::<String>::new());
    // The events stay until `knife db purge`; the tombstone is one of them.
    let events = h
        .store
        .read_events(
            &StreamFilter {
                event_type: Some("thread.deleted".into()),
                ..StreamFilter::thread(gone.clone(), 0)
            },
            10,
        )
        .await
        .unwrap();
    assert_eq!(events.len(), 1);

    // Incremental == rebuilt (sessions aside: their last-seen time is a heartbeat
    // written outside the log), and the rebuild drops the thread too.
    let mut before = h.store.dump_projections().await.unwrap();
    h.store.rebuild().await.unwrap();
    let mut rebuilt = h.store.dump_projections().await.unwrap();
    before.remove("provider_sessions");
    rebuilt.remove("provider_sessions");
    assert_eq!(rebuilt, before);
    assert_eq!(rows_of(&h.store, &gone).await, Vec::<String>::new());
    assert!(h.store.thread_projection(&keep).await.unwrap().is_some());

    // Deleting again is a 404.
    let again = exec.delete_thread(&gone, false).await.unwrap_err();
    assert!(
        matches!(again, RuntimeError::ThreadNotFound(_)),
        "{again:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn chg_08_delete_cancels_the_threads_pending_runtime_requests() {
    let h = common::Harness::new(common::Drain::Complete).await;
    let exec = h.execution();
    let thread = h.thread(None).await;
    // A request asked outside any run (MGR-43) and still pending.
    let now = h.clock.now();
    let request = RuntimeRequest {
        id: RuntimeRequestId::from("request_1"),
        thread_id: thread.clone(),
        run_id: None,
        node_id: NodeId::from("node:request_1"),
        provider_turn_id: None,
        kind: RuntimeRequestKind::UserInput,
        status: RuntimeRequestStatus::Pending,
        response_capability: ResponseCapability::Live {
            provider_session_id: ProviderSessionId::from("provider-session:fake:gone"),
        },
        prompt: Some("which branch?".into()),
        created_at: now,
        resolved_at: None,
        decision: None,
        tool_approval: None,
    };
    h.store
        .write(vec![DomainEvent::new(
            now,
            EventBody::RuntimeRequestUpdated(request.clone()),
        )])
        .await
        .unwrap();
    exec.delete_thread(&thread, false).await.unwrap();
    let events = h
        .store
        .read_events(
            &StreamFilter {
                event_type: Some("runtime-request.updated".into()),
                ..StreamFilter::thread(thread.clone(), 0)
            },
            10,
        )
        .await
        .unwrap();
    let last = match &events.last().unwrap().event.body {
        EventBody::RuntimeRequestUpdated(r) => r.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(last.id, request.id);
    assert_eq!(last.status, RuntimeRequestStatus::Cancelled);
    assert!(matches!(
        last.response_capability,
        ResponseCapability::NotResumable { ref reason } if reason.contains("deleted")
    ));
    assert!(
        h.store
            .get_runtime_request(&request.id)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(start_paused = true)]
async fn chg_08_delete_releases_the_session_and_revokes_the_mcp_credential() {
    let h = support::Harness::new(FakeBehaviour::default(), |_| {}).await;
    let exec = ExecutionService::new(h.store.clone(), h.clock.clone(), h.manager.clone());
    let thread = h.thread().await;
    let session = support::exclusive(&thread);
    h.open(&session, &thread).await;
    let config = h.slots.get(&thread).unwrap();
    assert!(
        h.registry.resolve(config.token()).is_some(),
        "minted on open"
    );
    assert!(h.manager.is_live(&session));

    exec.delete_thread(&thread, false).await.unwrap();
    assert!(
        h.registry.resolve(config.token()).is_none(),
        "the thread's MCP credential is revoked"
    );
    assert!(h.slots.get(&thread).is_none(), "its slot is cleared");
    assert!(!h.registry.info(&thread).active);
    assert!(
        !h.manager.is_live(&session),
        "the exclusive session is released"
    );
    assert_eq!(
        h.session_status(&session).await,
        Some(SessionStatus::Stopped)
    );
    assert!(h.store.get_thread(&thread).await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn chg_08_archive_releases_the_session_deletes_nothing_and_unarchive_restores() {
    let h = support::Harness::new(FakeBehaviour::default(), |_| {}).await;
    let exec = ExecutionService::new(h.store.clone(), h.clock.clone(), h.manager.clone());
    let thread = h.thread().await;
    let session = support::exclusive(&thread);
    h.open(&session, &thread).await;
    let config = h.slots.get(&thread).unwrap();
    let before = h.store.thread_projection(&thread).await.unwrap().unwrap();

    let archived = exec.archive_thread(&thread).await.unwrap();
    assert!(archived.is_archived());
    assert!(!h.manager.is_live(&session), "archive releases the session");
    assert!(
        h.registry.resolve(config.token()).is_none(),
        "and its credential"
    );
    let after = h.store.thread_projection(&thread).await.unwrap().unwrap();
    assert_eq!(after.turn_items, before.turn_items, "nothing deleted");
    assert_eq!(after.runs, before.runs);
    assert!(after.thread.is_archived());

    let back = exec.unarchive_thread(&thread).await.unwrap();
    assert!(!back.is_archived());
    assert_eq!(back.title, "mgr");
}

#[tokio::test(start_paused = true)]
async fn chg_08_archive_is_refused_while_a_run_is_active() {
    let h = common::Harness::new(common::Drain::Hang).await;
    let exec = h.execution();
    let thread = h.thread(None).await;
    exec.start_run(&thread, "busy".into()).await.unwrap();
    h.drains.wait_started(1).await;
    let err = exec.archive_thread(&thread).await.unwrap_err();
    assert!(
        matches!(err, RuntimeError::ActiveRunRefuses { .. }),
        "{err:?}"
    );
    assert!(!h.get(&thread).await.is_archived());
    exec.interrupt(&thread, InterruptReason::User)
        .await
        .unwrap();
    exec.await_idle(&thread).await;
}

#[tokio::test(start_paused = true)]
async fn chg_08_an_untitled_thread_is_named_from_its_first_message_in_the_run_transaction() {
    let h = common::Harness::new(common::Drain::Complete).await;
    let exec = h.execution();
    let thread = h.thread(None).await;
    let t = h.get(&thread).await;
    assert!(t.untitled);
    assert_eq!(t.title, UNTITLED_THREAD_TITLE);

    let text = format!(
        "\n  Refactor the {} module please  \nsecond line",
        "x".repeat(80)
    );
    exec.start_run(&thread, text).await.unwrap();
    exec.await_idle(&thread).await;
    let t = h.get(&thread).await;
    assert!(!t.untitled);
    assert_eq!(t.title.chars().count(), AUTO_TITLE_MAX_CHARS);
    assert!(t.title.starts_with("Refactor the xxx"), "{}", t.title);
    assert!(t.title.ends_with('…'));

    // The title is written by the run's own `thread.updated` (same transaction as
    // `run.created`: no separate write came between).
    let events = h
        .store
        .read_events(&StreamFilter::thread(thread.clone(), 0), 100)
        .await
        .unwrap();
    let created = events
        .iter()
        .position(|e| matches!(e.event.body, EventBody::RunCreated(_)))
        .unwrap();
    let titled = events
        .iter()
        .position(|e| matches!(&e.event.body, EventBody::ThreadUpdated(t) if !t.untitled))
        .unwrap();
    assert!(
        titled > created && titled <= created + 3,
        "{created} {titled}"
    );

    // A later message does not rename it; a rename sticks.
    exec.start_run(&thread, "something else".into())
        .await
        .unwrap();
    exec.await_idle(&thread).await;
    assert!(h.get(&thread).await.title.starts_with("Refactor"));
    exec.rename_thread(&thread, "  Mine  ").await.unwrap();
    assert_eq!(h.get(&thread).await.title, "Mine");
    let long = exec
        .rename_thread(&thread, &"n".repeat(TITLE_MAX_CHARS + 1))
        .await
        .unwrap_err();
    assert!(matches!(long, RuntimeError::Invalid(_)), "{long:?}");
}

/// The user and assistant texts of `items`, in order.
fn texts(items: &[TurnItem]) -> Vec<String> {
    items
        .iter()
        .filter_map(|i| match &i.kind {
            TurnItemKind::UserMessage { text, .. } => Some(format!("user: {text}")),
            TurnItemKind::AssistantMessage { text, .. } => Some(format!("assistant: {text}")),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn chg_09_a_fork_replays_the_source_history_up_to_the_run_and_leaves_the_source_alone() {
    let h = common::Harness::new(common::Drain::Complete).await;
    let exec = h.execution();
    let source = h.thread(None).await;
    for text in ["first", "second", "third"] {
        exec.start_run(&source, text.into()).await.unwrap();
        exec.await_idle(&source).await;
    }
    let before = h.projection(&source).await;
    let fork = exec
        .fork_thread(
            &source,
            ForkThreadRequest {
                after_run: Some(2),
                title: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(fork.title, format!("{} (fork)", before.thread.title));
    assert_eq!(
        fork.forked_from,
        Some(ThreadFork {
            thread_id: source.clone(),
            after_run: 2
        })
    );
    let forked = h.projection(&fork.id).await;
    assert_eq!(
        forked.runs.iter().map(|r| r.ordinal).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert_eq!(
        texts(&forked.turn_items),
        vec![
            "user: first",
            "assistant: done",
            "user: second",
            "assistant: done"
        ]
    );
    assert!(
        forked
            .runs
            .iter()
            .all(|r| r.thread_id == fork.id && r.status == RunStatus::Completed)
    );
    // The source is untouched (its session may be released meanwhile: not compared).
    let after = h.projection(&source).await;
    assert_eq!(after.thread, before.thread);
    assert_eq!(after.runs, before.runs);
    assert_eq!(after.turn_items, before.turn_items);

    // The next run of the fork is run 3 and replays exactly the forked history.
    let run = exec.start_run(&fork.id, "fourth".into()).await.unwrap();
    exec.await_idle(&fork.id).await;
    assert_eq!(run.ordinal, 3);
    let started = h.drains.started();
    let turn = started.iter().find(|s| s.thread == fork.id).unwrap();
    assert_eq!(
        texts(&turn.history),
        vec![
            "user: first",
            "assistant: done",
            "user: second",
            "assistant: done"
        ]
    );
    // Rebuild agrees with the copied history (sessions aside: their last-seen time is
    // a heartbeat written outside the log).
    let mut dump = h.store.dump_projections().await.unwrap();
    h.store.rebuild().await.unwrap();
    let mut rebuilt = h.store.dump_projections().await.unwrap();
    dump.remove("provider_sessions");
    rebuilt.remove("provider_sessions");
    assert_eq!(rebuilt, dump);
}

#[tokio::test(start_paused = true)]
async fn chg_09_a_fork_names_bad_runs() {
    let h = common::Harness::new(common::Drain::Complete).await;
    let exec = h.execution();
    let source = h.thread(None).await;
    let none = exec
        .fork_thread(&source, ForkThreadRequest::default())
        .await
        .unwrap_err();
    assert!(
        matches!(none, RuntimeError::Invalid(ref m) if m.contains("no finished run")),
        "{none:?}"
    );
    exec.start_run(&source, "one".into()).await.unwrap();
    exec.await_idle(&source).await;
    let missing = exec
        .fork_thread(
            &source,
            ForkThreadRequest {
                after_run: Some(5),
                title: None,
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(missing, RuntimeError::Invalid(ref m) if m.contains("no run 5")),
        "{missing:?}"
    );
    let fork = exec
        .fork_thread(&source, ForkThreadRequest::default())
        .await
        .unwrap();
    assert_eq!(fork.run_count, 1);
}
