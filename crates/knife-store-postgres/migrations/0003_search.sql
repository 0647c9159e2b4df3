-- Full-text search over threads (SPEC.md TURN-08): one row per document (thread titles
-- `title:<thread>`, settled turn items by item id), a GIN index over its tsvector
-- ('simple' configuration: no language stemming, as SQLite's unicode61), filled by the
-- fold of each settling event and here from the projections already stored.
CREATE TABLE search_docs (
    id        TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL,
    run_id    TEXT,
    kind      TEXT NOT NULL,
    body      TEXT NOT NULL
);
CREATE INDEX search_docs_thread ON search_docs (thread_id);
CREATE INDEX search_docs_fts ON search_docs USING GIN (to_tsvector('simple', body));

INSERT INTO search_docs (id, thread_id, run_id, kind, body)
SELECT 'title:' || id, id, NULL, 'title', payload_json::jsonb ->> 'title'
FROM threads WHERE coalesce(payload_json::jsonb ->> 'title', '') <> '';

INSERT INTO search_docs (id, thread_id, run_id, kind, body)
SELECT id, thread_id, run_id, payload_json::jsonb ->> 'type',
       CASE payload_json::jsonb ->> 'type'
           WHEN 'tool_call' THEN trim(
               coalesce(payload_json::jsonb ->> 'tool', '') || E'\n' ||
               coalesce(payload_json::jsonb ->> 'input', '') || E'\n' ||
               coalesce(payload_json::jsonb ->> 'output', '') || E'\n' ||
               coalesce(payload_json::jsonb ->> 'error', ''))
           ELSE payload_json::jsonb ->> 'text'
       END
FROM turn_items
WHERE status NOT IN ('pending', 'running', 'waiting', 'cancelled')
  AND payload_json::jsonb ->> 'type' IN ('user_message', 'assistant_message', 'tool_call')
  AND coalesce(payload_json::jsonb ->> 'text', payload_json::jsonb ->> 'tool', '') <> '';
