-- 0060_turn_item_chunks: appended text of a streaming item (LIVE-03) is one row per
-- `turn-item.appended` chunk instead of a rewrite of the whole `turn_items` row (TOAST
-- included) and its search document per chunk, so the WAL grows O(text) like the log.
-- An item is its `turn_items` row followed by its chunks in `sequence` order; a whole
-- snapshot of the item deletes them. A projection table: `rebuild` empties and refills
-- it (docs/2026-12-01-live-chunks.md).

CREATE TABLE turn_item_chunks (
    thread_id  TEXT   NOT NULL,
    item_id    TEXT   NOT NULL,
    sequence   BIGINT NOT NULL,
    field      TEXT   NOT NULL,
    start_byte BIGINT NOT NULL,
    end_byte   BIGINT NOT NULL,
    text       TEXT   NOT NULL,
    updated_at TEXT   NOT NULL,
    PRIMARY KEY (thread_id, item_id, sequence)
);
