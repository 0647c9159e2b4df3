-- 0050_nodes: process groups per node, node membership and cluster singletons (SPEC.md
-- SCALE-05, SCALE-07). Operational state, not part of the event log: `rebuild` leaves
-- these tables alone. A SQLite file has one node (`local`), but the contract is the same.

-- Process groups carry the node that recorded them: a node signals only its own, and a
-- pgid is only unique on its host.
CREATE TABLE process_groups_by_node (
    node          TEXT    NOT NULL,
    pgid          INTEGER NOT NULL,
    owner_pid     INTEGER NOT NULL,
    leader_start  INTEGER,
    thread_id     TEXT,
    label         TEXT    NOT NULL,
    registered_at TEXT    NOT NULL,
    PRIMARY KEY (node, pgid)
);
INSERT INTO process_groups_by_node
    (node, pgid, owner_pid, leader_start, thread_id, label, registered_at)
    SELECT 'local', pgid, owner_pid, leader_start, thread_id, label, registered_at
    FROM process_groups;
DROP TABLE process_groups;
ALTER TABLE process_groups_by_node RENAME TO process_groups;

-- One row per node id: where its process runs and until when it is live unless it
-- heartbeats again (microseconds since the Unix epoch).
CREATE TABLE cluster_nodes (
    node          TEXT    PRIMARY KEY NOT NULL,
    location      TEXT    NOT NULL,
    instance      TEXT    NOT NULL,
    joined_at_us  INTEGER NOT NULL,
    expires_at_us INTEGER NOT NULL
);

-- Cluster singletons (the session reaper's cluster sweep): held by one node until it
-- expires unless renewed.
CREATE TABLE cluster_singletons (
    name          TEXT    PRIMARY KEY NOT NULL,
    node          TEXT    NOT NULL,
    expires_at_us INTEGER NOT NULL
);
