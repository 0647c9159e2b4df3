-- knife on PostgreSQL, schema 1: the event log and the projection tables. Same tables
-- and columns as the SQLite backend (crates/knife-store-sqlite/migrations 0001..0003), so
-- the projections compare row for row; integers are BIGINT, JSON is kept as TEXT.

CREATE TABLE events (
    sequence     BIGINT PRIMARY KEY,
    event_id     TEXT   NOT NULL UNIQUE,
    thread_id    TEXT,
    run_id       TEXT,
    type         TEXT   NOT NULL,
    occurred_at  TEXT   NOT NULL,
    payload_json TEXT   NOT NULL
);
CREATE INDEX events_thread_sequence      ON events (thread_id, sequence);
CREATE INDEX events_thread_type_sequence ON events (thread_id, type, sequence);
CREATE INDEX events_run_sequence         ON events (run_id, sequence);
CREATE INDEX events_type_sequence        ON events (type, sequence);

CREATE TABLE projects (
    id               TEXT   PRIMARY KEY,
    updated_at_us    BIGINT NOT NULL,
    payload_json     TEXT   NOT NULL,
    version          BIGINT NOT NULL,
    created_sequence BIGINT NOT NULL,
    last_sequence    BIGINT NOT NULL,
    root             TEXT
);
CREATE UNIQUE INDEX projects_root ON projects (root);

CREATE TABLE threads (
    id                TEXT   PRIMARY KEY,
    project_id        TEXT   NOT NULL,
    status            TEXT   NOT NULL,
    updated_at_us     BIGINT NOT NULL,
    payload_json      TEXT   NOT NULL,
    version           BIGINT NOT NULL,
    created_sequence  BIGINT NOT NULL,
    last_sequence     BIGINT NOT NULL,
    time_suspended_us BIGINT,
    parent_thread_id  TEXT
);
CREATE INDEX threads_project_updated ON threads (project_id, updated_at_us);
CREATE INDEX threads_updated         ON threads (updated_at_us);
CREATE INDEX threads_suspended       ON threads (time_suspended_us)
    WHERE time_suspended_us IS NOT NULL;

CREATE TABLE runs (
    id               TEXT   PRIMARY KEY,
    thread_id        TEXT   NOT NULL,
    ordinal          BIGINT NOT NULL,
    status           TEXT   NOT NULL,
    payload_json     TEXT   NOT NULL,
    version          BIGINT NOT NULL,
    created_sequence BIGINT NOT NULL,
    last_sequence    BIGINT NOT NULL
);
CREATE INDEX runs_thread_ordinal ON runs (thread_id, ordinal);
CREATE INDEX runs_status         ON runs (status);

CREATE TABLE nodes (
    id               TEXT   PRIMARY KEY,
    thread_id        TEXT   NOT NULL,
    run_id           TEXT,
    status           TEXT   NOT NULL,
    payload_json     TEXT   NOT NULL,
    version          BIGINT NOT NULL,
    created_sequence BIGINT NOT NULL,
    last_sequence    BIGINT NOT NULL
);
CREATE INDEX nodes_thread ON nodes (thread_id, created_sequence);
CREATE INDEX nodes_run    ON nodes (run_id);

CREATE TABLE provider_sessions (
    id                   TEXT   PRIMARY KEY,
    provider_instance_id TEXT   NOT NULL,
    status               TEXT   NOT NULL,
    payload_json         TEXT   NOT NULL,
    version              BIGINT NOT NULL,
    created_sequence     BIGINT NOT NULL,
    last_sequence        BIGINT NOT NULL,
    last_seen_at_us      BIGINT
);
CREATE INDEX provider_sessions_status ON provider_sessions (status);

CREATE TABLE provider_session_bindings (
    provider_session_id TEXT   NOT NULL REFERENCES provider_sessions (id),
    thread_id           TEXT   NOT NULL,
    bound_sequence      BIGINT NOT NULL,
    last_sequence       BIGINT NOT NULL,
    PRIMARY KEY (provider_session_id, thread_id)
);
CREATE INDEX provider_session_bindings_thread
    ON provider_session_bindings (thread_id, bound_sequence);

CREATE TABLE provider_threads (
    id                  TEXT   PRIMARY KEY,
    thread_id           TEXT,
    provider_session_id TEXT,
    status              TEXT   NOT NULL,
    last_run_ordinal    BIGINT,
    payload_json        TEXT   NOT NULL,
    version             BIGINT NOT NULL,
    created_sequence    BIGINT NOT NULL,
    last_sequence       BIGINT NOT NULL
);
CREATE INDEX provider_threads_thread  ON provider_threads (thread_id, created_sequence);
CREATE INDEX provider_threads_session ON provider_threads (provider_session_id);

CREATE TABLE provider_turns (
    id                 TEXT   PRIMARY KEY,
    thread_id          TEXT   NOT NULL,
    run_id             TEXT   NOT NULL,
    provider_thread_id TEXT,
    ordinal            BIGINT NOT NULL,
    status             TEXT   NOT NULL,
    payload_json       TEXT   NOT NULL,
    version            BIGINT NOT NULL,
    created_sequence   BIGINT NOT NULL,
    last_sequence      BIGINT NOT NULL
);
CREATE INDEX provider_turns_thread ON provider_turns (thread_id, created_sequence);
CREATE INDEX provider_turns_run    ON provider_turns (run_id, ordinal);

CREATE TABLE runtime_requests (
    id               TEXT   PRIMARY KEY,
    thread_id        TEXT   NOT NULL,
    run_id           TEXT,
    status           TEXT   NOT NULL,
    payload_json     TEXT   NOT NULL,
    version          BIGINT NOT NULL,
    created_sequence BIGINT NOT NULL,
    last_sequence    BIGINT NOT NULL
);
CREATE INDEX runtime_requests_thread ON runtime_requests (thread_id, created_sequence);
CREATE INDEX runtime_requests_status ON runtime_requests (status);

CREATE TABLE turn_items (
    id               TEXT   PRIMARY KEY,
    thread_id        TEXT   NOT NULL,
    run_id           TEXT,
    ordinal          BIGINT NOT NULL,
    status           TEXT   NOT NULL,
    payload_json     TEXT   NOT NULL,
    version          BIGINT NOT NULL,
    created_sequence BIGINT NOT NULL,
    last_sequence    BIGINT NOT NULL
);
CREATE INDEX turn_items_thread_ordinal ON turn_items (thread_id, ordinal);
CREATE INDEX turn_items_run            ON turn_items (run_id);

CREATE TABLE process_groups (
    pgid          INTEGER PRIMARY KEY,
    owner_pid     BIGINT  NOT NULL,
    leader_start  BIGINT,
    thread_id     TEXT,
    label         TEXT    NOT NULL,
    registered_at TEXT    NOT NULL
);

-- The last sequence ever assigned (one row). Appends read and advance it under the
-- append lock, so sequences are never reused, even after `knife db purge` removed the
-- newest events.
CREATE TABLE log_head (
    id            BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (id),
    last_sequence BIGINT  NOT NULL
);
INSERT INTO log_head (id, last_sequence) VALUES (TRUE, 0);
