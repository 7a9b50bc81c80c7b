-- Personal safety plans (Stanley–Brown): one JSON document per owner, the
-- sections the person wrote in their own words. Owner data: forget-me
-- deletes the row and the export carries it. Only the persistent store
-- holds plans; incognito never writes one.

CREATE TABLE safety_plans (
    owner_id    TEXT PRIMARY KEY,
    value       TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
