-- Per-model-call usage records (SPEC.md TURN-06): one row per `model-call.recorded`
-- event, and one `run:<run id>` row of the whole usage of an ended run that has no
-- per-call record (as the fold writes it). Totals and budget sums are SUMs over it.
CREATE TABLE model_calls (
    id                   TEXT    PRIMARY KEY NOT NULL,
    thread_id            TEXT    NOT NULL,
    run_id               TEXT    NOT NULL,
    provider_instance_id TEXT    NOT NULL,
    model                TEXT,
    at_us                INTEGER NOT NULL,
    input_tokens         INTEGER NOT NULL,
    cached_input_tokens  INTEGER NOT NULL,
    output_tokens        INTEGER NOT NULL,
    reasoning_tokens     INTEGER NOT NULL,
    total_tokens         INTEGER NOT NULL,
    payload_json         TEXT    NOT NULL,
    version              INTEGER NOT NULL,
    created_sequence     INTEGER NOT NULL,
    last_sequence        INTEGER NOT NULL
);
CREATE INDEX model_calls_thread ON model_calls (thread_id, at_us);
CREATE INDEX model_calls_run    ON model_calls (run_id);
CREATE INDEX model_calls_at     ON model_calls (at_us);

-- The runs already ended with usage count once each, as the fold counts them.
INSERT INTO model_calls (id, thread_id, run_id, provider_instance_id, model, at_us,
    input_tokens, cached_input_tokens, output_tokens, reasoning_tokens, total_tokens,
    payload_json, version, created_sequence, last_sequence)
SELECT 'run:' || r.id, r.thread_id, r.id,
       json_extract(r.payload_json, '$.provider_instance_id'),
       json_extract(r.payload_json, '$.model'),
       unixepoch(substr(r.at, 1, 19)) * 1000000 + CASE WHEN substr(r.at, 20, 1) = '.'
           THEN CAST(substr(rtrim(substr(r.at, 21), 'Z') || '000000', 1, 6) AS INTEGER)
           ELSE 0 END,
       coalesce(json_extract(r.payload_json, '$.usage.input_tokens'), 0),
       coalesce(json_extract(r.payload_json, '$.usage.cached_input_tokens'), 0),
       coalesce(json_extract(r.payload_json, '$.usage.output_tokens'), 0),
       coalesce(json_extract(r.payload_json, '$.usage.reasoning_tokens'), 0),
       coalesce(json_extract(r.payload_json, '$.usage.total_tokens'), 0),
       json_object('id', 'run:' || r.id, 'thread_id', r.thread_id, 'run_id', r.id,
                   'provider_turn_id', NULL,
                   'provider_instance_id', json_extract(r.payload_json, '$.provider_instance_id'),
                   'model', json_extract(r.payload_json, '$.model'), 'ordinal', 0,
                   'usage', json_extract(r.payload_json, '$.usage'), 'at', r.at),
       1, r.last_sequence, r.last_sequence
FROM (SELECT *, coalesce(json_extract(payload_json, '$.completed_at'),
                         json_extract(payload_json, '$.requested_at')) AS at
      FROM runs
      WHERE status NOT IN ('queued', 'running')
        AND json_type(payload_json, '$.usage') = 'object') r;
