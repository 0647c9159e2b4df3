//! Raising a thread's budgets and continuing its work (SPEC.md TURN-07): the raise is
//! kept on the thread row; `continue` starts a continuation run with a system message.

use super::*;
use crate::execution::runs::RunStart;

/// Text of the system message a continuation after a budget raise opens with.
pub const CONTINUE_AFTER_BUDGET_RAISE: &str = "The budget was raised. Continue from where you \
     left off without repeating completed work.";

/// Its description, shown by clients.
pub const BUDGET_CONTINUE_DESCRIPTION: &str = "Continuing after a budget raise";

impl ExecutionService {
    /// Adds `tokens` and `cost_microdollars` to the budgets of `thread_id` (every
    /// limit its runs are checked against, TURN-07) and, with `continue_run`,
    /// starts a continuation run. Returns the thread's total raise and the run.
    ///
    /// Errors: `ThreadNotFound`; `Invalid` when nothing is added; `RunInProgress`
    /// when `continue_run` and a run is active (the raise is kept); `Conflict`.
    pub async fn raise_budget(
        &self,
        thread_id: &ThreadId,
        tokens: u64,
        cost_microdollars: u64,
        continue_run: bool,
    ) -> Result<(BudgetRaise, Option<Run>), RuntimeError> {
        if tokens == 0 && cost_microdollars == 0 && !continue_run {
            return Err(RuntimeError::Invalid(
                "the raise adds nothing; give tokens and/or cost_usd (and `continue` to start \
                 a run)"
                    .into(),
            ));
        }
        let store = &self.inner.store;
        let mut raised = None;
        for _ in 0..50 {
            let version = store
                .row_version(knife_store::EntityKind::Thread, thread_id.as_str())
                .await?;
            let mut thread = store
                .get_thread(thread_id)
                .await?
                .ok_or_else(|| RuntimeError::ThreadNotFound(thread_id.clone()))?;
            let mut raise = thread.budget_raise.unwrap_or_default();
            raise.tokens = raise.tokens.saturating_add(tokens);
            raise.cost_microdollars = raise.cost_microdollars.saturating_add(cost_microdollars);
            if tokens == 0 && cost_microdollars == 0 {
                raised = Some(raise);
                break;
            }
            let now = self.inner.clock.now();
            thread.budget_raise = Some(raise);
            thread.updated_at = now;
            let guard = knife_store::RowGuard::new(
                knife_store::EntityKind::Thread,
                thread_id.as_str(),
                version,
            );
            let event = DomainEvent::new(now, EventBody::ThreadUpdated(thread));
            if store.write_if(guard, vec![event]).await?.is_some() {
                raised = Some(raise);
                break;
            }
        }
        let Some(raise) = raised else {
            return Err(RuntimeError::Conflict);
        };
        if !continue_run {
            return Ok((raise, None));
        }
        self.wait_if_finishing(thread_id).await;
        match self.begin(thread_id, RunStart::BudgetRaised).await? {
            Begun::Started { run, .. } => Ok((raise, Some(*run))),
            Begun::Busy(run) => Err(RuntimeError::RunInProgress {
                thread: thread_id.clone(),
                run: run.unwrap_or_else(|| RunId::from("(starting)")),
            }),
            Begun::NotClaimed | Begun::Exhausted { .. } => Err(RuntimeError::Internal(
                "a budget continuation was answered as a resume".into(),
            )),
        }
    }
}
