-- Full-text search over threads (SPEC.md TURN-08): one row per document (thread titles
-- `title:<thread>`, settled turn items by item id) and an FTS5 index over its body,
-- kept in step by triggers. Filled by the fold of each settling event, and here from the
-- projections already on disk.
CREATE TABLE search_docs (
    id        TEXT PRIMARY KEY NOT NULL,
    thread_id TEXT NOT NULL,
    run_id    TEXT,
    kind      TEXT NOT NULL,
    body      TEXT NOT NULL
);
CREATE INDEX search_docs_thread ON search_docs (thread_id);

CREATE VIRTUAL TABLE search_fts USING fts5(
    body,
    content = 'search_docs',
    content_rowid = 'rowid',
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER search_docs_ai AFTER INSERT ON search_docs BEGIN
    INSERT INTO search_fts (rowid, body) VALUES (new.rowid, new.body);
END;
CREATE TRIGGER search_docs_ad AFTER DELETE ON search_docs BEGIN
    INSERT INTO search_fts (search_fts, rowid, body) VALUES ('delete', old.rowid, old.body);
END;
CREATE TRIGGER search_docs_au AFTER UPDATE ON search_docs BEGIN
    INSERT INTO search_fts (search_fts, rowid, body) VALUES ('delete', old.rowid, old.body);
    INSERT INTO search_fts (rowid, body) VALUES (new.rowid, new.body);
END;

INSERT INTO search_docs (id, thread_id, run_id, kind, body)
SELECT 'title:' || id, id, NULL, 'title', json_extract(payload_json, '$.title')
FROM threads WHERE coalesce(json_extract(payload_json, '$.title'), '') <> '';

INSERT INTO search_docs (id, thread_id, run_id, kind, body)
SELECT id, thread_id, run_id, json_extract(payload_json, '$.type'),
       CASE json_extract(payload_json, '$.type')
           WHEN 'tool_call' THEN trim(
               coalesce(json_extract(payload_json, '$.tool'), '') || char(10) ||
               coalesce(json_extract(payload_json, '$.input'), '') || char(10) ||
               coalesce(json_extract(payload_json, '$.output'), '') || char(10) ||
               coalesce(json_extract(payload_json, '$.error'), ''))
           ELSE json_extract(payload_json, '$.text')
       END
FROM turn_items
WHERE status NOT IN ('pending', 'running', 'waiting', 'cancelled')
  AND json_extract(payload_json, '$.type') IN ('user_message', 'assistant_message', 'tool_call')
  AND coalesce(json_extract(payload_json, '$.text'), json_extract(payload_json, '$.tool'), '') <> '';
