-- 0002_thread_leases: leases with fencing epochs (SPEC.md SCALE-04), shared by every node
-- on this database. Operational state, not part of the event log: `rebuild` leaves this
-- table alone. A row is never deleted (a release expires it), so a thread's epoch only
-- grows. Times are the database's clock (clock_timestamp()), in microseconds.

CREATE TABLE thread_leases (
    thread_id     TEXT   PRIMARY KEY,
    -- The node holding the lease ('' with epoch 0: a placeholder row a takeover
    -- sweep created for a claimed thread that never had a lease).
    node          TEXT   NOT NULL,
    -- +1 with every acquisition (first run, resume, takeover).
    epoch         BIGINT NOT NULL,
    expires_at_us BIGINT NOT NULL
);
CREATE INDEX thread_leases_expiry ON thread_leases (expires_at_us);
