-- Per-model-call usage records (SPEC.md TURN-06): one row per `model-call.recorded`
-- event, and one `run:<run id>` row of the whole usage of an ended run that has no
-- per-call record (as the fold writes it). Totals and budget sums are SUMs over it.
CREATE TABLE model_calls (
    id                   TEXT   PRIMARY KEY,
    thread_id            TEXT   NOT NULL,
    run_id               TEXT   NOT NULL,
    provider_instance_id TEXT   NOT NULL,
    model                TEXT,
    at_us                BIGINT NOT NULL,
    input_tokens         BIGINT NOT NULL,
    cached_input_tokens  BIGINT NOT NULL,
    output_tokens        BIGINT NOT NULL,
    reasoning_tokens     BIGINT NOT NULL,
    total_tokens         BIGINT NOT NULL,
    payload_json         TEXT   NOT NULL,
    version              BIGINT NOT NULL,
    created_sequence     BIGINT NOT NULL,
    last_sequence        BIGINT NOT NULL
);
CREATE INDEX model_calls_thread ON model_calls (thread_id, at_us);
CREATE INDEX model_calls_run    ON model_calls (run_id);
CREATE INDEX model_calls_at     ON model_calls (at_us);

-- The runs already ended with usage count once each, as the fold counts them.
INSERT INTO model_calls (id, thread_id, run_id, provider_instance_id, model, at_us,
    input_tokens, cached_input_tokens, output_tokens, reasoning_tokens, total_tokens,
    payload_json, version, created_sequence, last_sequence)
SELECT 'run:' || r.id, r.thread_id, r.id, r.p ->> 'provider_instance_id', r.p ->> 'model',
       (extract(epoch FROM (r.at)::timestamptz) * 1000000)::bigint,
       coalesce((r.p -> 'usage' ->> 'input_tokens')::bigint, 0),
       coalesce((r.p -> 'usage' ->> 'cached_input_tokens')::bigint, 0),
       coalesce((r.p -> 'usage' ->> 'output_tokens')::bigint, 0),
       coalesce((r.p -> 'usage' ->> 'reasoning_tokens')::bigint, 0),
       coalesce((r.p -> 'usage' ->> 'total_tokens')::bigint, 0),
       jsonb_build_object('id', 'run:' || r.id, 'thread_id', r.thread_id, 'run_id', r.id,
                          'provider_turn_id', NULL,
                          'provider_instance_id', r.p -> 'provider_instance_id',
                          'model', r.p -> 'model', 'ordinal', 0,
                          'usage', r.p -> 'usage', 'at', r.at)::text,
       1, r.last_sequence, r.last_sequence
FROM (SELECT id, thread_id, last_sequence, payload_json::jsonb AS p,
             coalesce(payload_json::jsonb ->> 'completed_at',
                      payload_json::jsonb ->> 'requested_at') AS at
      FROM runs
      WHERE status NOT IN ('queued', 'running')
        AND jsonb_typeof(payload_json::jsonb -> 'usage') = 'object') r;
