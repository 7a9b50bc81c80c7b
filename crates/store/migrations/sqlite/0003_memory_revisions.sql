-- A revision counter per memory namespace (owner, kind), bumped by triggers
-- on every insert, update and delete of memory_records, whoever writes. The
-- retrieval index cache compares it to decide whether a cached index is
-- still current, so a write (or a deletion the person asked for) by any
-- process is seen on the next turn.

CREATE TABLE memory_revisions (
    owner_id        TEXT NOT NULL,
    namespace_kind  TEXT NOT NULL,
    revision        INTEGER NOT NULL,
    PRIMARY KEY (owner_id, namespace_kind)
);

CREATE TRIGGER memory_records_revision_insert AFTER INSERT ON memory_records
BEGIN
    INSERT INTO memory_revisions (owner_id, namespace_kind, revision)
    VALUES (NEW.owner_id, NEW.namespace_kind, 1)
    ON CONFLICT (owner_id, namespace_kind) DO UPDATE SET revision = revision + 1;
END;

CREATE TRIGGER memory_records_revision_update AFTER UPDATE ON memory_records
BEGIN
    INSERT INTO memory_revisions (owner_id, namespace_kind, revision)
    VALUES (NEW.owner_id, NEW.namespace_kind, 1)
    ON CONFLICT (owner_id, namespace_kind) DO UPDATE SET revision = revision + 1;
    INSERT INTO memory_revisions (owner_id, namespace_kind, revision)
    VALUES (OLD.owner_id, OLD.namespace_kind, 1)
    ON CONFLICT (owner_id, namespace_kind) DO UPDATE SET revision = revision + 1;
END;

CREATE TRIGGER memory_records_revision_delete AFTER DELETE ON memory_records
BEGIN
    INSERT INTO memory_revisions (owner_id, namespace_kind, revision)
    VALUES (OLD.owner_id, OLD.namespace_kind, 1)
    ON CONFLICT (owner_id, namespace_kind) DO UPDATE SET revision = revision + 1;
END;
