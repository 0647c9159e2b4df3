-- 0075_append_pipeline: two helpers that let a node send a whole append transaction in
-- one round trip, BEGIN to COMMIT (crates/knife-store-postgres/src/pipelined.rs; SPEC
-- SCALE-10): the statements number the group's events from 1 and the server adds the
-- log head read under the append lock; what the node used to read and decide on first
-- (fences, guards, tombstones) is asserted instead. No table changes (SQLite has none
-- of this: its writer is in-process).

-- `n` plus the sequence base the transaction set with
-- `set_config('knife.base', head, true)`; `n` itself when none is set (the usual path,
-- rebuild). An unset custom setting reads as NULL, and as '' after a transaction that
-- set it locally: both count as 0.
CREATE FUNCTION knife_seq(n BIGINT) RETURNS BIGINT
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT $1 + COALESCE(NULLIF(current_setting('knife.base', true), ''), '0')::BIGINT $$;

-- Raises SQLSTATE KN001 (the transaction is then rolled back) unless `ok` is true; the
-- node then writes the group the usual way, which reads what failed and answers each
-- append on its own.
CREATE FUNCTION knife_expect(ok BOOLEAN, what TEXT) RETURNS BOOLEAN
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF ok IS NOT TRUE THEN
        RAISE EXCEPTION 'knife: expected %', what USING ERRCODE = 'KN001';
    END IF;
    RETURN TRUE;
END
$$;
