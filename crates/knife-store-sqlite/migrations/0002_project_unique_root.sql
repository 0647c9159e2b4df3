-- 0002_project_unique_root: one project per folder. Adds the indexed `root` column
-- (the project's canonical root, written by the fold) and a UNIQUE index on it.

ALTER TABLE projects ADD COLUMN root TEXT;

-- A database written before this migration may hold several projects on one root
-- (the bug this migration closes). The oldest project of each root keeps it; later
-- ones keep NULL (NULLs never collide in a UNIQUE index), so opening an old database
-- never fails here. `rebuild` folds such a log the same way (see fold.rs).
UPDATE projects
SET root = json_extract(payload_json, '$.root')
WHERE created_sequence = (
    SELECT MIN(older.created_sequence)
    FROM projects AS older
    WHERE json_extract(older.payload_json, '$.root') = json_extract(projects.payload_json, '$.root')
);

CREATE UNIQUE INDEX projects_root ON projects (root);
