//! The scenarios every driver must pass, written once against [`Rig`] / [`Peer`]:
//! open, stream, approval, interrupt, Stop while an approval is open, crash of the
//! child, resume after a restart, close, malformed output.

use std::future::Future;
use std::time::Duration;

use knife_process::group_alive;
use knife_protocol::*;
use knife_runtime::*;

use super::rigs::{LIMIT, Rig, Step};

/// Builds the rig of one driver for a scenario's steps.
pub trait MakeRig: Fn(&'static [Step]) -> Self::Fut {
    type Fut: Future<Output = Rig>;
}

impl<F, Fut> MakeRig for F
where
    F: Fn(&'static [Step]) -> Fut,
    Fut: Future<Output = Rig>,
{
    type Fut = Fut;
}

impl Rig {
    async fn projection(&self) -> ThreadProjection {
        self.store
            .thread_projection(&self.thread)
            .await
            .unwrap()
            .unwrap()
    }

    /// Polls the projection every 20 ms until `check` holds, at most [`LIMIT`].
    async fn until(
        &self,
        what: &str,
        check: impl Fn(&ThreadProjection) -> bool,
    ) -> ThreadProjection {
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            let p = self.projection().await;
            if check(&p) {
                return p;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: timed out waiting for {what}",
                self.peer.driver()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn start(&self, step: Step) -> Run {
        self.exec
            .start_run(&self.thread, self.peer.prompt(step))
            .await
            .unwrap()
    }

    async fn finish(&self, run: &Run) -> Run {
        tokio::time::timeout(LIMIT, self.exec.await_idle(&self.thread))
            .await
            .unwrap_or_else(|_| panic!("{}: the run did not end", self.peer.driver()));
        self.projection()
            .await
            .runs
            .into_iter()
            .find(|r| r.id == run.id)
            .unwrap()
    }

    async fn run(&self, step: Step) -> Run {
        let run = self.start(step).await;
        self.finish(&run).await
    }

    async fn pending_request(&self) -> RuntimeRequest {
        self.until("a pending runtime request", |p| {
            p.runtime_requests
                .iter()
                .any(|r| r.status == RuntimeRequestStatus::Pending)
        })
        .await
        .runtime_requests
        .into_iter()
        .find(|r| r.status == RuntimeRequestStatus::Pending)
        .unwrap()
    }

    async fn answer(&self, request: &RuntimeRequestId, decision: ApprovalDecision) -> bool {
        self.exec
            .respond_to_request(
                &self.thread,
                request,
                RequestAnswer {
                    decision,
                    message: None,
                },
            )
            .await
            .is_ok()
    }

    /// Ends the "server process": runs stopped, sessions released.
    async fn stop_server(&self) {
        self.exec.shutdown(Duration::from_secs(10)).await;
        self.exec.manager().shutdown().await;
    }

    fn name(&self) -> &'static str {
        self.peer.driver()
    }
}

/// The final text of the run's assistant messages, in order.
fn answers(p: &ThreadProjection, run: &Run) -> Vec<(String, TurnItemStatus)> {
    p.turn_items
        .iter()
        .filter(|i| i.run_id.as_ref() == Some(&run.id))
        .filter_map(|i| match &i.kind {
            TurnItemKind::AssistantMessage { text, .. } => Some((text.clone(), i.status)),
            _ => None,
        })
        .collect()
}

async fn assert_answered(rig: &Rig, run: &Run, text: &str) {
    assert_eq!(run.status, RunStatus::Completed, "{}: {run:?}", rig.name());
    let p = rig.projection().await;
    let found = answers(&p, run);
    assert!(
        found
            .iter()
            .any(|(t, s)| t.trim() == text && *s == TurnItemStatus::Completed),
        "{}: no completed answer {text:?} in {found:?}",
        rig.name()
    );
}

/// Open + stream: the session is opened (recorded with its driver), the answer is
/// streamed into one completed assistant message, the run completes.
pub async fn open_and_stream(make: impl MakeRig) {
    const STEPS: &[Step] = &[Step::Answer("Hello from the conformance suite.")];
    let rig = make(STEPS).await;
    let run = rig.run(STEPS[0]).await;
    assert_answered(&rig, &run, "Hello from the conformance suite.").await;
    let p = rig.projection().await;
    assert!(
        p.provider_sessions
            .iter()
            .any(|s| s.driver == rig.peer.driver()),
        "{}: no provider session recorded: {:?}",
        rig.name(),
        p.provider_sessions
    );
    rig.stop_server().await;
}

/// Approval: the driver's question becomes a pending runtime request; allowing it
/// resolves the request and the run goes on to its answer.
pub async fn approval(make: impl MakeRig) {
    const STEPS: &[Step] = &[Step::Approval("Approved and done.")];
    let rig = make(STEPS).await;
    let run = rig.start(STEPS[0]).await;
    let request = rig.pending_request().await;
    assert_eq!(request.run_id.as_ref(), Some(&run.id), "{}", rig.name());
    assert!(
        rig.answer(&request.id, ApprovalDecision::AllowOnce).await,
        "{}: the answer was refused",
        rig.name()
    );
    let run = rig.finish(&run).await;
    assert_answered(&rig, &run, "Approved and done.").await;
    let p = rig.projection().await;
    let settled = p
        .runtime_requests
        .iter()
        .find(|r| r.id == request.id)
        .unwrap();
    assert_eq!(
        settled.status,
        RuntimeRequestStatus::Resolved,
        "{}",
        rig.name()
    );
    rig.stop_server().await;
}

/// Interrupt: a turn that would run forever ends `interrupted`, and the thread takes
/// the next message.
pub async fn interrupt(make: impl MakeRig) {
    const STEPS: &[Step] = &[Step::Hang, Step::Answer("After the interrupt.")];
    let rig = make(STEPS).await;
    let run = rig.start(STEPS[0]).await;
    rig.until("the turn to run", |p| {
        p.provider_turns
            .iter()
            .any(|t| t.run_id == run.id && t.status == ProviderTurnStatus::Running)
    })
    .await;
    rig.exec
        .interrupt(&rig.thread, InterruptReason::User)
        .await
        .unwrap();
    let run = rig.finish(&run).await;
    assert_eq!(
        run.status,
        RunStatus::Interrupted,
        "{}: {run:?}",
        rig.name()
    );
    let next = rig.run(STEPS[1]).await;
    assert_answered(&rig, &next, "After the interrupt.").await;
    rig.stop_server().await;
}

/// Stop while an approval is open: the request is cancelled (a late answer is refused),
/// the run ends `interrupted`, and a driver with a wire answers the peer's pending
/// question before it interrupts the turn, so the peer is not left waiting.
pub async fn stop_with_open_approval(make: impl MakeRig) {
    const STEPS: &[Step] = &[Step::ApprovalThenWait];
    let rig = make(STEPS).await;
    let run = rig.start(STEPS[0]).await;
    let request = rig.pending_request().await;
    rig.exec
        .interrupt(&rig.thread, InterruptReason::User)
        .await
        .unwrap();
    let run = rig.finish(&run).await;
    assert_eq!(
        run.status,
        RunStatus::Interrupted,
        "{}: {run:?}",
        rig.name()
    );
    let p = rig.projection().await;
    let settled = p
        .runtime_requests
        .iter()
        .find(|r| r.id == request.id)
        .unwrap();
    assert_eq!(
        settled.status,
        RuntimeRequestStatus::Cancelled,
        "{}",
        rig.name()
    );
    let approvals: Vec<_> = p
        .turn_items
        .iter()
        .filter(|i| matches!(i.kind, TurnItemKind::Approval { .. }))
        .map(|i| i.status)
        .collect();
    assert_eq!(approvals, [TurnItemStatus::Cancelled], "{}", rig.name());
    assert!(
        !rig.answer(&request.id, ApprovalDecision::AllowOnce).await,
        "{}: a late answer was taken",
        rig.name()
    );
    assert_ne!(
        rig.peer.approval_answered_before_interrupt(),
        Some(false),
        "{}: the peer's approval question was not answered before the interrupt",
        rig.name()
    );
    rig.stop_server().await;
}

/// Crash of the child (for the built-in agent: the model stream is cut): the run
/// fails with an error that says so, and the next message gets a working runtime.
pub async fn crash(make: impl MakeRig) {
    const STEPS: &[Step] = &[Step::Crash, Step::Answer("After the crash.")];
    let rig = make(STEPS).await;
    let run = rig.run(STEPS[0]).await;
    assert_eq!(run.status, RunStatus::Failed, "{}: {run:?}", rig.name());
    let error = run.error.clone().unwrap();
    assert!(!error.message.is_empty(), "{}: {error:?}", rig.name());
    let next = rig.run(STEPS[1]).await;
    assert_answered(&rig, &next, "After the crash.").await;
    rig.stop_server().await;
}

/// Resume: after the server stopped, a new one continues the thread with its context
/// (native resume, session load, or the transcript).
pub async fn resume(make: impl MakeRig) {
    const STEPS: &[Step] = &[
        Step::Answer("The first answer."),
        Step::Answer("The second answer."),
    ];
    let mut rig = make(STEPS).await;
    let first = rig.run(STEPS[0]).await;
    assert_answered(&rig, &first, "The first answer.").await;
    rig.stop_server().await;
    rig.exec = rig.peer.execution(&rig.store, &rig.clock);
    let second = rig.run(STEPS[1]).await;
    assert_answered(&rig, &second, "The second answer.").await;
    assert!(
        rig.peer.resumed_with_context("The first answer."),
        "{}: the second run was not given the thread's earlier context",
        rig.name()
    );
    rig.stop_server().await;
}

/// Close: releasing the session stops its child (no process group left, recorded or
/// alive) and records the session `stopped`.
pub async fn close(make: impl MakeRig) {
    const STEPS: &[Step] = &[Step::Answer("Closing soon.")];
    let rig = make(STEPS).await;
    let run = rig.run(STEPS[0]).await;
    assert_answered(&rig, &run, "Closing soon.").await;
    let groups = rig.store.list_process_groups().await.unwrap();
    assert_eq!(
        !groups.is_empty(),
        rig.peer.runs_a_process(),
        "{}: process groups while the session is open: {groups:?}",
        rig.name()
    );
    rig.stop_server().await;
    assert!(
        rig.store.list_process_groups().await.unwrap().is_empty(),
        "{}: a process group is still recorded after the close",
        rig.name()
    );
    for group in &groups {
        let pgid = u32::try_from(group.pgid).unwrap();
        assert!(
            !group_alive(pgid),
            "{}: group {pgid} survived the close",
            rig.name()
        );
    }
    let p = rig.projection().await;
    assert!(!p.provider_sessions.is_empty(), "{}", rig.name());
    for session in &p.provider_sessions {
        assert_eq!(
            session.status,
            SessionStatus::Stopped,
            "{}: {session:?}",
            rig.name()
        );
    }
}

/// Malformed output: a driver that can skip it completes the turn; one that cannot
/// fails the run with an error saying what was wrong. Either way the run ends and the
/// thread takes the next message.
pub async fn malformed_output(make: impl MakeRig) {
    const STEPS: &[Step] = &[
        Step::Malformed("Answered through the noise."),
        Step::Answer("The next answer."),
    ];
    let rig = make(STEPS).await;
    let run = rig.run(STEPS[0]).await;
    if rig.peer.skips_malformed_output() {
        assert_answered(&rig, &run, "Answered through the noise.").await;
    } else {
        assert_eq!(run.status, RunStatus::Failed, "{}: {run:?}", rig.name());
        assert!(
            run.error.as_ref().is_some_and(|e| !e.message.is_empty()),
            "{}: {run:?}",
            rig.name()
        );
    }
    let next = rig.run(STEPS[1]).await;
    assert_answered(&rig, &next, "The next answer.").await;
    rig.stop_server().await;
}
