-- Memory revisions from one clock. A namespace's revision used to count its
-- own writes (1, 2, 3, ...). Forget-me deletes an owner's revision rows with
-- their records; counting again from 1 would repeat numbers that another
-- process's index cache may still hold for the deleted content, and that
-- cache would then serve deleted memory. Every write now takes the next
-- value of one clock for the whole table, so a revision is never given out
-- twice, whatever is deleted. Caches compare revisions for equality only.

CREATE TABLE memory_revision_clock (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    value  INTEGER NOT NULL
);
INSERT INTO memory_revision_clock (id, value)
VALUES (1, COALESCE((SELECT MAX(revision) FROM memory_revisions), 0));

DROP TRIGGER memory_records_revision_insert;
DROP TRIGGER memory_records_revision_update;
DROP TRIGGER memory_records_revision_delete;

CREATE TRIGGER memory_records_revision_insert AFTER INSERT ON memory_records
BEGIN
    UPDATE memory_revision_clock SET value = value + 1 WHERE id = 1;
    INSERT INTO memory_revisions (owner_id, namespace_kind, revision)
    VALUES (NEW.owner_id, NEW.namespace_kind, (SELECT value FROM memory_revision_clock WHERE id = 1))
    ON CONFLICT (owner_id, namespace_kind) DO UPDATE SET revision = excluded.revision;
END;

CREATE TRIGGER memory_records_revision_update AFTER UPDATE ON memory_records
BEGIN
    UPDATE memory_revision_clock SET value = value + 1 WHERE id = 1;
    INSERT INTO memory_revisions (owner_id, namespace_kind, revision)
    VALUES (NEW.owner_id, NEW.namespace_kind, (SELECT value FROM memory_revision_clock WHERE id = 1))
    ON CONFLICT (owner_id, namespace_kind) DO UPDATE SET revision = excluded.revision;
    INSERT INTO memory_revisions (owner_id, namespace_kind, revision)
    VALUES (OLD.owner_id, OLD.namespace_kind, (SELECT value FROM memory_revision_clock WHERE id = 1))
    ON CONFLICT (owner_id, namespace_kind) DO UPDATE SET revision = excluded.revision;
END;

CREATE TRIGGER memory_records_revision_delete AFTER DELETE ON memory_records
BEGIN
    UPDATE memory_revision_clock SET value = value + 1 WHERE id = 1;
    INSERT INTO memory_revisions (owner_id, namespace_kind, revision)
    VALUES (OLD.owner_id, OLD.namespace_kind, (SELECT value FROM memory_revision_clock WHERE id = 1))
    ON CONFLICT (owner_id, namespace_kind) DO UPDATE SET revision = excluded.revision;
END;
