-- Search filtered by project without a join per match (SPEC.md TURN-08): every document
-- carries its thread's project as one FTS5 token (`project_key` = hex of the project id,
-- always one alphanumeric token), so `project_id=` is an FTS5 AND of two doclists instead
-- of a scan of every match of the words (a small project among 100,000 items took ~100 ms).
ALTER TABLE search_docs ADD COLUMN project_key TEXT;
UPDATE search_docs SET project_key = (
    SELECT hex(t.project_id) FROM threads t WHERE t.id = search_docs.thread_id
);

DROP TRIGGER search_docs_ai;
DROP TRIGGER search_docs_ad;
DROP TRIGGER search_docs_au;
DROP TABLE search_fts;

CREATE VIRTUAL TABLE search_fts USING fts5(
    body,
    project_key,
    content = 'search_docs',
    content_rowid = 'rowid',
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER search_docs_ai AFTER INSERT ON search_docs BEGIN
    INSERT INTO search_fts (rowid, body, project_key)
    VALUES (new.rowid, new.body, new.project_key);
END;
CREATE TRIGGER search_docs_ad AFTER DELETE ON search_docs BEGIN
    INSERT INTO search_fts (search_fts, rowid, body, project_key)
    VALUES ('delete', old.rowid, old.body, old.project_key);
END;
CREATE TRIGGER search_docs_au AFTER UPDATE ON search_docs BEGIN
    INSERT INTO search_fts (search_fts, rowid, body, project_key)
    VALUES ('delete', old.rowid, old.body, old.project_key);
    INSERT INTO search_fts (rowid, body, project_key)
    VALUES (new.rowid, new.body, new.project_key);
END;

INSERT INTO search_fts (search_fts) VALUES ('rebuild');
