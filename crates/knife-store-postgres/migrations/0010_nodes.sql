-- 0010_nodes: process groups per node, node membership and cluster singletons (SPEC.md
-- SCALE-05, SCALE-07). Operational state, not part of the event log: `rebuild` leaves
-- these tables alone. Times are the database's clock, in microseconds.

-- Process groups carry the node that recorded them: a node signals only its own, and a
-- pgid is only unique on its host. Rows from before are the default node's.
ALTER TABLE process_groups ADD COLUMN node TEXT NOT NULL DEFAULT 'local';
ALTER TABLE process_groups DROP CONSTRAINT process_groups_pkey;
ALTER TABLE process_groups ADD PRIMARY KEY (node, pgid);

-- One row per node id: where its process runs and until when it is live unless it
-- heartbeats again.
CREATE TABLE cluster_nodes (
    node          TEXT   PRIMARY KEY,
    location      TEXT   NOT NULL,
    instance      TEXT   NOT NULL,
    joined_at_us  BIGINT NOT NULL,
    expires_at_us BIGINT NOT NULL
);

-- Cluster singletons (the session reaper's cluster sweep): held by one node until it
-- expires unless renewed.
CREATE TABLE cluster_singletons (
    name          TEXT   PRIMARY KEY,
    node          TEXT   NOT NULL,
    expires_at_us BIGINT NOT NULL
);
