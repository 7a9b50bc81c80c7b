-- Listing one owner's threads. The server stores an owner's thread ID as
-- `OWNER:ID` (owner names never contain ':'); the owner is the text before
-- the first ':' ('' when there is none), as `opencouch_store::thread_owner`
-- says. A generated column needs no change on the write path and covers
-- existing rows; the index serves one owner's threads, most recently
-- updated first, a page at a time (keyset on updated_at, thread_id), so
-- what other owners store never hides or slows anyone's list.

ALTER TABLE thread_state ADD COLUMN owner_id TEXT GENERATED ALWAYS AS (
    CASE WHEN instr(thread_id, ':') > 0
         THEN substr(thread_id, 1, instr(thread_id, ':') - 1)
         ELSE '' END
) VIRTUAL;

CREATE INDEX thread_state_owner_updated_idx ON thread_state (owner_id, updated_at DESC, thread_id);
-- Every owner's threads (`opencouch threads list`), same order.
CREATE INDEX thread_state_updated_id_idx ON thread_state (updated_at DESC, thread_id);
DROP INDEX thread_state_updated_idx;
