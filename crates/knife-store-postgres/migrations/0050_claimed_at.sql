-- 0050_claimed_at: the claim column says what it is (issue 17 item 3). The thread's
-- execution claim (EXEC-04, `Thread::claimed_at`, named `time_suspended` before) is when
-- the work was claimed; who runs it now is the thread's lease (`thread_leases`: node,
-- epoch, expiry), kept beside the claim because `rebuild` must not touch it.

ALTER TABLE threads RENAME COLUMN time_suspended_us TO claimed_at_us;
ALTER INDEX threads_suspended RENAME TO threads_claimed;
