-- 0001_init: the event log (source of truth) and the projection tables folded from it.
-- Projection rows hold the whole entity as JSON plus indexed scalar columns; see src/fold.rs.

CREATE TABLE events (
    sequence     INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id     TEXT    NOT NULL UNIQUE,
    thread_id    TEXT,
    run_id       TEXT,
    type         TEXT    NOT NULL,
    occurred_at  TEXT    NOT NULL,
    payload_json TEXT    NOT NULL
);
CREATE INDEX events_thread_sequence      ON events (thread_id, sequence);
CREATE INDEX events_thread_type_sequence ON events (thread_id, type, sequence);
CREATE INDEX events_run_sequence         ON events (run_id, sequence);
CREATE INDEX events_type_sequence        ON events (type, sequence);

-- Every projection table: id PK, indexed columns, payload_json (whole entity),
-- version (1 on insert, +1 per upsert), created_sequence (first upsert),
-- last_sequence (latest upsert).

CREATE TABLE projects (
    id               TEXT    PRIMARY KEY NOT NULL,
    updated_at_us    INTEGER NOT NULL,
    payload_json     TEXT    NOT NULL,
    version          INTEGER NOT NULL,
    created_sequence INTEGER NOT NULL,
    last_sequence    INTEGER NOT NULL
);

CREATE TABLE threads (
    id               TEXT    PRIMARY KEY NOT NULL,
    project_id       TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    updated_at_us    INTEGER NOT NULL,
    payload_json     TEXT    NOT NULL,
    version          INTEGER NOT NULL,
    created_sequence INTEGER NOT NULL,
    last_sequence    INTEGER NOT NULL
);
CREATE INDEX threads_project_updated ON threads (project_id, updated_at_us);
CREATE INDEX threads_updated         ON threads (updated_at_us);

CREATE TABLE runs (
    id               TEXT    PRIMARY KEY NOT NULL,
    thread_id        TEXT    NOT NULL,
    ordinal          INTEGER NOT NULL,
    status           TEXT    NOT NULL,
    payload_json     TEXT    NOT NULL,
    version          INTEGER NOT NULL,
    created_sequence INTEGER NOT NULL,
    last_sequence    INTEGER NOT NULL
);
CREATE INDEX runs_thread_ordinal ON runs (thread_id, ordinal);
CREATE INDEX runs_status         ON runs (status);

CREATE TABLE nodes (
    id               TEXT    PRIMARY KEY NOT NULL,
    thread_id        TEXT    NOT NULL,
    run_id           TEXT,
    status           TEXT    NOT NULL,
    payload_json     TEXT    NOT NULL,
    version          INTEGER NOT NULL,
    created_sequence INTEGER NOT NULL,
    last_sequence    INTEGER NOT NULL
);
CREATE INDEX nodes_thread ON nodes (thread_id, created_sequence);
CREATE INDEX nodes_run    ON nodes (run_id);

CREATE TABLE provider_sessions (
    id                   TEXT    PRIMARY KEY NOT NULL,
    provider_instance_id TEXT    NOT NULL,
    status               TEXT    NOT NULL,
    payload_json         TEXT    NOT NULL,
    version              INTEGER NOT NULL,
    created_sequence     INTEGER NOT NULL,
    last_sequence        INTEGER NOT NULL
);
CREATE INDEX provider_sessions_status ON provider_sessions (status);

CREATE TABLE provider_session_bindings (
    provider_session_id TEXT    NOT NULL REFERENCES provider_sessions (id),
    thread_id           TEXT    NOT NULL,
    bound_sequence      INTEGER NOT NULL,
    last_sequence       INTEGER NOT NULL,
    PRIMARY KEY (provider_session_id, thread_id)
);
CREATE INDEX provider_session_bindings_thread ON provider_session_bindings (thread_id, bound_sequence);

CREATE TABLE provider_threads (
    id                  TEXT    PRIMARY KEY NOT NULL,
    thread_id           TEXT,
    provider_session_id TEXT,
    status              TEXT    NOT NULL,
    last_run_ordinal    INTEGER,
    payload_json        TEXT    NOT NULL,
    version             INTEGER NOT NULL,
    created_sequence    INTEGER NOT NULL,
    last_sequence       INTEGER NOT NULL
);
CREATE INDEX provider_threads_thread  ON provider_threads (thread_id, created_sequence);
CREATE INDEX provider_threads_session ON provider_threads (provider_session_id);

CREATE TABLE provider_turns (
    id                 TEXT    PRIMARY KEY NOT NULL,
    thread_id          TEXT    NOT NULL,
    run_id             TEXT    NOT NULL,
    provider_thread_id TEXT,
    ordinal            INTEGER NOT NULL,
    status             TEXT    NOT NULL,
    payload_json       TEXT    NOT NULL,
    version            INTEGER NOT NULL,
    created_sequence   INTEGER NOT NULL,
    last_sequence      INTEGER NOT NULL
);
CREATE INDEX provider_turns_thread ON provider_turns (thread_id, created_sequence);
CREATE INDEX provider_turns_run    ON provider_turns (run_id, ordinal);

CREATE TABLE runtime_requests (
    id               TEXT    PRIMARY KEY NOT NULL,
    thread_id        TEXT    NOT NULL,
    run_id           TEXT,
    status           TEXT    NOT NULL,
    payload_json     TEXT    NOT NULL,
    version          INTEGER NOT NULL,
    created_sequence INTEGER NOT NULL,
    last_sequence    INTEGER NOT NULL
);
CREATE INDEX runtime_requests_thread ON runtime_requests (thread_id, created_sequence);
CREATE INDEX runtime_requests_status ON runtime_requests (status);

CREATE TABLE turn_items (
    id               TEXT    PRIMARY KEY NOT NULL,
    thread_id        TEXT    NOT NULL,
    run_id           TEXT,
    ordinal          INTEGER NOT NULL,
    status           TEXT    NOT NULL,
    payload_json     TEXT    NOT NULL,
    version          INTEGER NOT NULL,
    created_sequence INTEGER NOT NULL,
    last_sequence    INTEGER NOT NULL
);
CREATE INDEX turn_items_thread_ordinal ON turn_items (thread_id, ordinal);
CREATE INDEX turn_items_run            ON turn_items (run_id);
