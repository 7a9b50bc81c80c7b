-- Memory revisions from one clock. A namespace's revision used to count its
-- own writes (1, 2, 3, ...). Forget-me deletes an owner's revision rows with
-- their records; counting again from 1 would repeat numbers that another
-- instance's index cache may still hold for the deleted content, and that
-- cache would then serve deleted memory. Every write now takes the next
-- value of one sequence, so a revision is never given out twice, whatever
-- is deleted. Caches compare revisions for equality only.

CREATE SEQUENCE memory_revision_clock;
SELECT setval('memory_revision_clock',
              COALESCE((SELECT MAX(revision) FROM memory_revisions), 0) + 1, false);

CREATE OR REPLACE FUNCTION memory_records_bump_revision() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    next_revision BIGINT := nextval('memory_revision_clock');
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO memory_revisions (owner_id, namespace_kind, revision)
        VALUES (NEW.owner_id, NEW.namespace_kind, next_revision)
        ON CONFLICT (owner_id, namespace_kind)
        DO UPDATE SET revision = EXCLUDED.revision;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO memory_revisions (owner_id, namespace_kind, revision)
        VALUES (OLD.owner_id, OLD.namespace_kind, next_revision)
        ON CONFLICT (owner_id, namespace_kind)
        DO UPDATE SET revision = EXCLUDED.revision;
    END IF;
    RETURN NULL;
END;
$$;
