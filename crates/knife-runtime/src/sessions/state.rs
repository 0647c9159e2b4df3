//! The mutable state of one live provider session, behind intent methods: attached
//! threads, busy turns, the idle generation and its timers, pins, unloads, credentials.
//!
//! Every field is private to this file: the other `sessions/*` files say what happened
//! (`mark_busy`, `attach`, `take_for_release`, …) and this file decides what changes,
//! including the generation checks every background decision depends on (MGR-27,
//! MGR-28). The guard is a std mutex in [`super::entry::Entry`], never held across
//! `.await`; the methods never await and never lock anything else. Why methods and not
//! one task per session: docs/2026-12-01-session-state.md.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use knife_protocol::*;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::mcp::CredentialId;

/// A running turn: its thread and run (for the watchdog's synthetic terminal).
#[derive(Clone, Debug)]
pub(crate) struct BusyTurn {
    pub thread: ThreadId,
    pub run: RunId,
}

/// Per-thread idle-unload bookkeeping on a shared runtime (MGR-14).
#[derive(Default)]
struct ThreadUnload {
    generation: u64,
    task: Option<AbortHandle>,
}

impl ThreadUnload {
    /// Invalidates the pending unload decision and cancels its timer; the new generation.
    fn bump(&mut self) -> u64 {
        self.generation += 1;
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.generation
    }
}

/// Mutable state of an entry; guarded by a std mutex never held across `.await`.
#[derive(Default)]
pub(crate) struct EntryState {
    /// Set once the entry left the map; every later decision on it is dropped.
    removed: bool,
    attached: HashSet<ThreadId>,
    /// Every thread that ever attached (their requests and rosters are settled on release).
    threads_seen: HashSet<ThreadId>,
    /// Resume de-dup key of each loaded thread (MGR-10).
    loaded_keys: HashMap<ThreadId, String>,
    /// Native thread id of each thread, learned from resumes and provider-thread updates.
    native_ids: HashMap<ThreadId, String>,
    /// MCP credentials this session recorded per thread (kept on plain detach).
    credentials: HashMap<ThreadId, CredentialId>,
    /// Running turns by provider turn id; busy while non-empty.
    busy: HashMap<ProviderTurnId, BusyTurn>,
    /// When the runtime last showed life for a running turn (start or any event).
    last_event: Option<Instant>,
    /// The stuck-turn watchdog while busy.
    stall_task: Option<AbortHandle>,
    /// Bumped by every busy/activity change; a background idle decision acts only if
    /// the generation it captured is still current (MGR-27).
    idle_generation: u64,
    idle_task: Option<AbortHandle>,
    /// When the current pin began (pending background work deferring release, MGR-24).
    pinned_since: Option<Instant>,
    /// When the session last went idle or saw activity.
    idle_since: Option<Instant>,
    thread_unloads: HashMap<ThreadId, ThreadUnload>,
    /// Background task ids this runtime listed per provider thread (MGR-46).
    listed_tasks: HashMap<ProviderThreadId, HashSet<String>>,
    /// When the pump last raised the row's last-seen time (throttled, REAP-01).
    last_touch: Option<Instant>,
}

/// What the live-session listing shows of one entry's state (sorted lists).
pub(crate) struct StateView {
    pub threads: Vec<ThreadId>,
    pub busy_turns: Vec<ProviderTurnId>,
    /// Attached threads holding an MCP credential of this session.
    pub mcp_threads: Vec<ThreadId>,
    /// When the idle window began; `None` while busy.
    pub idle_since: Option<Instant>,
    pub pinned_since: Option<Instant>,
}

/// The watchdog's reading of a busy session (see [`EntryState::stalled_turns`]).
pub(crate) enum Stall {
    /// Not busy any more (or removed): the watchdog ends.
    Over,
    /// The runtime showed life within the limit: wait again.
    Alive,
    /// No event for the whole limit: these turns are stalled.
    Stalled(Vec<(ProviderTurnId, BusyTurn)>),
}

fn sorted<T: Ord + Clone>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = items.collect();
    v.sort();
    v
}

impl EntryState {
    /// The state of a session just opened for `thread` (its native id and MCP
    /// credential if known).
    pub fn opened(
        thread: &ThreadId,
        native_id: Option<String>,
        credential: Option<CredentialId>,
    ) -> Self {
        let mut state = Self::default();
        state.attach(thread);
        if let Some(native) = native_id {
            state.native_ids.insert(thread.clone(), native);
        }
        if let Some(id) = credential {
            state.credentials.insert(thread.clone(), id);
        }
        state
    }

    // ---- reads ----

    /// True once the entry left the map (every later decision on it is dropped).
    pub fn is_removed(&self) -> bool {
        self.removed
    }

    /// True while some turn runs.
    pub fn is_busy(&self) -> bool {
        !self.busy.is_empty()
    }

    /// True while some turn of `thread` runs.
    pub fn thread_busy(&self, thread: &ThreadId) -> bool {
        self.busy.values().any(|t| &t.thread == thread)
    }

    /// True while a pin (pending background work) defers the idle release (MGR-24).
    pub fn is_pinned(&self) -> bool {
        self.pinned_since.is_some()
    }

    /// Whether `thread` is attached now.
    pub fn is_attached(&self, thread: &ThreadId) -> bool {
        self.attached.contains(thread)
    }

    /// How many threads are attached now.
    pub fn attached_count(&self) -> usize {
        self.attached.len()
    }

    /// The attached threads, sorted.
    pub fn attached_sorted(&self) -> Vec<ThreadId> {
        sorted(self.attached.iter().cloned())
    }

    /// Every thread that ever attached, sorted.
    pub fn threads_seen_sorted(&self) -> Vec<ThreadId> {
        sorted(self.threads_seen.iter().cloned())
    }

    /// The current idle generation (captured by a background idle decision).
    pub fn idle_generation(&self) -> u64 {
        self.idle_generation
    }

    /// True while the session is live, not busy, and at `generation`: an idle decision
    /// taken at `generation` may still act (MGR-27, MGR-28).
    pub fn still_idle_at(&self, generation: u64) -> bool {
        !self.removed && !self.is_busy() && self.idle_generation == generation
    }

    /// Whether `thread` is attached here or credential `id` is recorded for any of
    /// this session's threads (then the credential must not be revoked).
    pub fn holds_credential(&self, thread: &ThreadId, id: &CredentialId) -> bool {
        self.attached.contains(thread) || self.credentials.values().any(|c| c == id)
    }

    /// Whether `thread` is loaded under resume key `key` (MGR-10).
    pub fn is_loaded(&self, thread: &ThreadId, key: &str) -> bool {
        self.loaded_keys.get(thread).map(String::as_str) == Some(key)
    }

    /// The background task ids this runtime listed for `provider_thread` (MGR-46).
    pub fn listed_tasks(&self, provider_thread: &ProviderThreadId) -> HashSet<String> {
        self.listed_tasks
            .get(provider_thread)
            .cloned()
            .unwrap_or_default()
    }

    /// What the live-session listing shows.
    pub fn view(&self) -> StateView {
        StateView {
            threads: self.attached_sorted(),
            busy_turns: sorted(self.busy.keys().cloned()),
            mcp_threads: sorted(
                self.credentials
                    .keys()
                    .filter(|t| self.attached.contains(*t))
                    .cloned(),
            ),
            idle_since: if self.is_busy() {
                None
            } else {
                self.idle_since
            },
            pinned_since: self.pinned_since,
        }
    }

    // ---- attach / detach ----

    /// Records `thread` as attached (and as seen, for the release's settlement).
    pub fn attach(&mut self, thread: &ThreadId) {
        self.attached.insert(thread.clone());
        self.threads_seen.insert(thread.clone());
    }

    /// Records the MCP credential this session holds for `thread`.
    pub fn record_credential(&mut self, thread: &ThreadId, id: CredentialId) {
        self.credentials.insert(thread.clone(), id);
    }

    /// Undoes one cancelled attach of `thread`: the attachment, its loaded key, and
    /// `credential` if it is still the one recorded for the thread.
    pub fn undo_attach(&mut self, thread: &ThreadId, credential: Option<&CredentialId>) {
        self.attached.remove(thread);
        self.loaded_keys.remove(thread);
        if let Some(id) = credential
            && self.credentials.get(thread) == Some(id)
        {
            self.credentials.remove(thread);
        }
    }

    /// Detaches `thread`: its attachment, loaded key and pending unload go; its MCP
    /// credential too when `forget_credential`. Returns whether it was attached.
    pub fn detach(&mut self, thread: &ThreadId, forget_credential: bool) -> bool {
        let was = self.attached.remove(thread);
        self.loaded_keys.remove(thread);
        if let Some(mut unload) = self.thread_unloads.remove(thread)
            && let Some(task) = unload.task.take()
        {
            task.abort();
        }
        if forget_credential {
            self.credentials.remove(thread);
        }
        was
    }

    /// Takes every recorded MCP credential (the release revokes them, MGR-38).
    pub fn take_credentials(&mut self) -> Vec<(ThreadId, CredentialId)> {
        self.credentials.drain().collect()
    }

    /// The release's acquire step: unless `only_if_generation` is given and the session
    /// turned busy or moved past it, marks the entry removed and aborts its timers.
    /// Returns whether the release goes ahead.
    pub fn take_for_release(&mut self, only_if_generation: Option<u64>) -> bool {
        if let Some(generation) = only_if_generation
            && (self.is_busy() || self.idle_generation != generation)
        {
            return false;
        }
        self.removed = true;
        if let Some(task) = self.idle_task.take() {
            task.abort();
        }
        if let Some(task) = self.stall_task.take() {
            task.abort();
        }
        for unload in self.thread_unloads.values_mut() {
            if let Some(task) = unload.task.take() {
                task.abort();
            }
        }
        true
    }

    // ---- events from the runtime ----

    /// The runtime showed life (any event): the stuck-turn watchdog's clock restarts.
    pub fn saw_event(&mut self) {
        self.last_event = Some(Instant::now());
    }

    /// Learns the native thread id of `thread` (provider-thread update or resume).
    pub fn learn_native_id(&mut self, thread: &ThreadId, native: String) {
        self.native_ids.insert(thread.clone(), native);
    }

    /// Adds background task ids the runtime listed for `provider_thread` (MGR-46).
    pub fn list_tasks(
        &mut self,
        provider_thread: &ProviderThreadId,
        tasks: impl IntoIterator<Item = String>,
    ) {
        self.listed_tasks
            .entry(provider_thread.clone())
            .or_default()
            .extend(tasks);
    }

    /// Whether the row's last-seen time is due a raise (at most once per `interval`,
    /// REAP-01); when it is, the time of this raise is recorded.
    pub fn touch_due(&mut self, interval: Duration) -> bool {
        let now = Instant::now();
        if self
            .last_touch
            .is_some_and(|last| now.duration_since(last) < interval)
        {
            return false;
        }
        self.last_touch = Some(now);
        true
    }

    /// After a resume: `thread` is loaded under `key` (and its native id if given).
    pub fn mark_loaded(&mut self, thread: &ThreadId, key: String, native: Option<String>) {
        self.loaded_keys.insert(thread.clone(), key);
        if let Some(native) = native {
            self.native_ids.insert(thread.clone(), native);
        }
    }

    // ---- busy / idle ----

    /// Marks turn `turn` running: cancels the idle timer, bumps the generation, drops a
    /// pin, cancels a pending unload of its thread. `watchdog` is called to start the
    /// stuck-turn watchdog when none runs (it returns `None` when that is off).
    pub fn mark_busy(
        &mut self,
        turn: &ProviderTurnId,
        busy: BusyTurn,
        watchdog: impl FnOnce() -> Option<AbortHandle>,
    ) {
        let thread = busy.thread.clone();
        self.busy.insert(turn.clone(), busy);
        self.last_event = Some(Instant::now());
        if self.stall_task.is_none() {
            self.stall_task = watchdog();
        }
        if let Some(task) = self.idle_task.take() {
            task.abort();
        }
        self.idle_generation += 1;
        self.pinned_since = None;
        if let Some(unload) = self.thread_unloads.get_mut(&thread) {
            unload.bump();
        }
    }

    /// Marks turn `turn` ended; returns its thread. Clearing twice is harmless and
    /// never clears another turn (MGR-23).
    pub fn mark_idle(&mut self, turn: &ProviderTurnId) -> Option<ThreadId> {
        self.busy.remove(turn).map(|t| t.thread)
    }

    /// Activity ends a pin: progress shows the pinned work is alive (MGR-26).
    pub fn end_pin(&mut self) {
        self.pinned_since = None;
    }

    /// (Re)arms the idle timer unless busy or removed: a new generation invalidates every
    /// decision of the previous timer (MGR-27). `spawn` starts the timer for the new
    /// generation.
    pub fn arm_idle(&mut self, spawn: impl FnOnce(u64) -> AbortHandle) {
        if self.removed || self.is_busy() {
            return;
        }
        if let Some(task) = self.idle_task.take() {
            task.abort();
        }
        self.idle_generation += 1;
        self.idle_since = Some(Instant::now());
        self.idle_task = Some(spawn(self.idle_generation));
    }

    /// Pending background work defers the idle release taken at `generation`: returns
    /// how long the current pin has lasted (it starts now if none), or `None` when the
    /// decision is stale (busy, removed, or the generation moved; MGR-24, MGR-27).
    pub fn pin(&mut self, generation: u64) -> Option<Duration> {
        if !self.still_idle_at(generation) {
            return None;
        }
        let now = Instant::now();
        let since = *self.pinned_since.get_or_insert(now);
        Some(now.duration_since(since))
    }

    // ---- per-thread unload of shared runtimes ----

    /// Before a resume or a turn: `thread` is in use, its pending unload is cancelled.
    pub fn hold_thread_loaded(&mut self, thread: &ThreadId) {
        self.thread_unloads
            .entry(thread.clone())
            .or_default()
            .bump();
    }

    /// Arms the idle unload of `thread` if it is attached, not busy and its native id
    /// is known (MGR-14); `spawn` starts the timer for the unload's new generation.
    pub fn arm_thread_unload(&mut self, thread: &ThreadId, spawn: impl FnOnce(u64) -> AbortHandle) {
        if self.removed
            || self.thread_busy(thread)
            || !self.attached.contains(thread)
            || !self.native_ids.contains_key(thread)
        {
            return;
        }
        let unload = self.thread_unloads.entry(thread.clone()).or_default();
        let generation = unload.bump();
        unload.task = Some(spawn(generation));
    }

    fn unload_current(&self, thread: &ThreadId, generation: u64) -> bool {
        !self.removed
            && !self.thread_busy(thread)
            && self
                .thread_unloads
                .get(thread)
                .is_some_and(|u| u.generation == generation)
    }

    /// The native id to unload `thread` by, if the unload armed at `generation` is still
    /// due (thread attached, not busy, not used since).
    pub fn unload_target(&self, thread: &ThreadId, generation: u64) -> Option<String> {
        if !self.unload_current(thread, generation) || !self.attached.contains(thread) {
            return None;
        }
        self.native_ids.get(thread).cloned()
    }

    /// The unload's commit step: if the unload armed at `generation` is still due, the
    /// thread counts as not loaded any more. Returns whether the unload goes ahead.
    pub fn take_for_unload(&mut self, thread: &ThreadId, generation: u64) -> bool {
        if !self.unload_current(thread, generation) {
            return false;
        }
        self.loaded_keys.remove(thread);
        self.thread_unloads.remove(thread);
        true
    }

    // ---- the stuck-turn watchdog ----

    /// When the watchdog should look next (`limit` after the last sign of life), or
    /// `None` when it ends (not busy, removed, or a limit too large to represent).
    pub fn stall_deadline(&mut self, limit: Duration) -> Option<Instant> {
        if self.removed || !self.is_busy() {
            self.stall_task = None;
            return None;
        }
        let deadline = self
            .last_event
            .unwrap_or_else(Instant::now)
            .checked_add(limit);
        if deadline.is_none() {
            self.stall_task = None;
        }
        deadline
    }

    /// At the deadline: whether the running turns sent nothing for `limit`.
    pub fn stalled_turns(&mut self, limit: Duration) -> Stall {
        if self.removed || !self.is_busy() {
            self.stall_task = None;
            return Stall::Over;
        }
        if self
            .last_event
            .is_some_and(|at| at.checked_add(limit).is_none_or(|d| d > Instant::now()))
        {
            return Stall::Alive;
        }
        Stall::Stalled(
            self.busy
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
    }
}
