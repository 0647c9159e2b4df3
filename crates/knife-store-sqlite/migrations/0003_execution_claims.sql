-- 0003_execution_claims: durable execution (SPEC.md EXEC). Indexed claim columns on
-- threads (folded from the `time_suspended` / `parent_thread_id` fields of the thread
-- entity, so `rebuild` reproduces them), and the process groups a server spawned.
--
-- Threads written before this migration carry neither field (no claim, no parent),
-- so the new columns start NULL and need no backfill.

ALTER TABLE threads ADD COLUMN time_suspended_us INTEGER;
ALTER TABLE threads ADD COLUMN parent_thread_id TEXT;
-- The restart sweep lists claimed threads; only a handful are claimed at a time.
CREATE INDEX threads_suspended ON threads (time_suspended_us)
    WHERE time_suspended_us IS NOT NULL;

-- Process groups spawned by a knife server (tool commands, adapter processes), so the
-- next server can kill the ones that outlived a crashed owner. Operational state,
-- not part of the event log: `rebuild` leaves this table alone.
CREATE TABLE process_groups (
    pgid          INTEGER PRIMARY KEY NOT NULL,
    -- pid of the knife server that registered the group.
    owner_pid     INTEGER NOT NULL,
    -- start time of the group leader (clock ticks since boot, /proc/<pid>/stat field 22),
    -- to tell a reused pid from the original leader; NULL when unknown.
    leader_start  INTEGER,
    thread_id     TEXT,
    label         TEXT    NOT NULL,
    registered_at TEXT    NOT NULL
);

-- Stale-session reaper (SPEC.md REAP): when a provider session was last seen. The fold
-- sets it to the session entity's `updated_at` on every provider-session event (so a
-- rebuild reproduces it); `Store::touch_provider_session` raises it on activity.
-- Rows written before this migration stay NULL: readers fall back to `updated_at`.
ALTER TABLE provider_sessions ADD COLUMN last_seen_at_us INTEGER;
