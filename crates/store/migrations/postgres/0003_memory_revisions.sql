-- A revision counter per memory namespace (owner, kind), bumped by a trigger
-- on every insert, update and delete of memory_records, whichever instance
-- writes. The retrieval index cache compares it to decide whether a cached
-- index is still current, so a write (or a deletion the person asked for)
-- by any instance is seen on the next turn.

CREATE TABLE memory_revisions (
    owner_id        TEXT NOT NULL,
    namespace_kind  TEXT NOT NULL,
    revision        BIGINT NOT NULL,
    PRIMARY KEY (owner_id, namespace_kind)
);

CREATE FUNCTION memory_records_bump_revision() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO memory_revisions (owner_id, namespace_kind, revision)
        VALUES (NEW.owner_id, NEW.namespace_kind, 1)
        ON CONFLICT (owner_id, namespace_kind)
        DO UPDATE SET revision = memory_revisions.revision + 1;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO memory_revisions (owner_id, namespace_kind, revision)
        VALUES (OLD.owner_id, OLD.namespace_kind, 1)
        ON CONFLICT (owner_id, namespace_kind)
        DO UPDATE SET revision = memory_revisions.revision + 1;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER memory_records_revision
AFTER INSERT OR UPDATE OR DELETE ON memory_records
FOR EACH ROW EXECUTE FUNCTION memory_records_bump_revision();
