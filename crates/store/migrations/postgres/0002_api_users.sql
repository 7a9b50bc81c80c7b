-- API users of `opencouch serve`: a name (the owner id) and the SHA-256 of
-- the bearer token; the token itself is never stored. A revoked user keeps
-- its row (revoked_at set); only one active user per name. Several server
-- instances on one database share this table.

CREATE TABLE api_users (
    insertion_order  BIGSERIAL PRIMARY KEY,
    name             TEXT NOT NULL,
    token_sha256     TEXT NOT NULL UNIQUE CHECK (length(token_sha256) = 64),
    created_at       TIMESTAMPTZ NOT NULL,
    revoked_at       TIMESTAMPTZ
);
CREATE UNIQUE INDEX api_users_active_name_idx ON api_users (name) WHERE revoked_at IS NULL;
