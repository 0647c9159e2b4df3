-- 0040_thread_leases: leases with fencing epochs (SPEC.md SCALE-04). Which node runs a
-- claimed thread's work now, until when, under which epoch every write for it is fenced.
-- Operational state, not part of the event log: `rebuild` leaves this table alone. A row
-- is never deleted (a release expires it), so a thread's epoch only grows.

CREATE TABLE thread_leases (
    thread_id     TEXT    PRIMARY KEY NOT NULL,
    -- The node holding the lease (`local` for the one node of a SQLite file).
    node          TEXT    NOT NULL,
    -- +1 with every acquisition (first run, resume, takeover).
    epoch         INTEGER NOT NULL,
    -- Microseconds since the Unix epoch, on the lease clock.
    expires_at_us INTEGER NOT NULL
);
