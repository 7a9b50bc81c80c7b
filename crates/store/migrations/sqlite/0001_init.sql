-- OpenCouch durable schema, SQLite. Mirrors the PostgreSQL schema with TEXT
-- for JSON and timestamps (RFC 3339, UTC, fixed width so text order is time
-- order) and a little-endian f32 BLOB for embeddings. Applied once at
-- start-up by `SqliteStores::migrate()`; request paths never issue DDL.

CREATE TABLE memory_records (
    insertion_order     INTEGER PRIMARY KEY AUTOINCREMENT,
    id                  TEXT NOT NULL,
    owner_id            TEXT NOT NULL,
    namespace_kind      TEXT NOT NULL CHECK (namespace_kind IN ('semantic', 'episodic', 'procedural')),
    category            TEXT,
    value               TEXT NOT NULL,
    created_at          TEXT NOT NULL,
    last_referenced_at  TEXT,
    dormant_at          TEXT,
    user_visible        INTEGER NOT NULL DEFAULT 1,
    embedding           BLOB,
    embedding_dim       INTEGER,
    embedding_model     TEXT,
    UNIQUE (id, owner_id, namespace_kind)
);
CREATE INDEX memory_records_owner_kind_idx ON memory_records (owner_id, namespace_kind);
CREATE INDEX memory_records_last_referenced_idx ON memory_records (last_referenced_at);

CREATE TABLE crisis_log (
    insertion_order           INTEGER PRIMARY KEY AUTOINCREMENT,
    id                        TEXT NOT NULL UNIQUE,
    event_type                TEXT NOT NULL,
    session_id_opaque         TEXT NOT NULL,
    user_id_or_null           TEXT,
    detected_at               TEXT NOT NULL,
    detected_date             TEXT NOT NULL,
    level                     INTEGER NOT NULL CHECK (level BETWEEN 0 AND 3),
    response_path             TEXT NOT NULL,
    retention_extended_until  TEXT,
    value                     TEXT NOT NULL
);
CREATE INDEX crisis_log_detected_date_idx ON crisis_log (detected_date);
CREATE INDEX crisis_log_session_idx ON crisis_log (session_id_opaque);

CREATE TABLE session_feedback (
    insertion_order    INTEGER PRIMARY KEY AUTOINCREMENT,
    id                 TEXT NOT NULL UNIQUE,
    session_id_opaque  TEXT NOT NULL,
    user_id_or_null    TEXT,
    recorded_at        TEXT NOT NULL,
    recorded_date      TEXT NOT NULL,
    label              TEXT NOT NULL CHECK (label IN ('positive', 'negative', 'skip')),
    turn_count_at_end  INTEGER NOT NULL CHECK (turn_count_at_end >= 0),
    source             TEXT NOT NULL CHECK (source IN ('cli_end', 'cli_exit', 'api_end')),
    schema_version     INTEGER NOT NULL,
    value              TEXT NOT NULL
);
CREATE INDEX session_feedback_session_idx ON session_feedback (session_id_opaque);
CREATE INDEX session_feedback_recorded_date_idx ON session_feedback (recorded_date);

CREATE TABLE thread_state (
    thread_id      TEXT PRIMARY KEY,
    updated_at     TEXT NOT NULL,
    turn_count     INTEGER NOT NULL,
    message_count  INTEGER NOT NULL,
    value          TEXT NOT NULL
);
CREATE INDEX thread_state_updated_idx ON thread_state (updated_at DESC);

CREATE TABLE transcript (
    thread_id       TEXT NOT NULL,
    idx             INTEGER NOT NULL,
    role            TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
    content         TEXT NOT NULL,
    route           TEXT,
    response_style  TEXT,
    crisis_level    INTEGER CHECK (crisis_level BETWEEN 0 AND 3),
    at              TEXT,
    PRIMARY KEY (thread_id, idx)
) WITHOUT ROWID;

CREATE TABLE active_sessions (
    thread_id                 TEXT PRIMARY KEY,
    started_at                TEXT NOT NULL,
    last_active_at            TEXT,
    transcript_start_index    INTEGER NOT NULL,
    max_crisis_level          INTEGER NOT NULL CHECK (max_crisis_level BETWEEN 0 AND 3),
    session_buffer            TEXT NOT NULL,
    rotate_after_this_turn    INTEGER NOT NULL DEFAULT 0,
    finalize_required_reason  TEXT
);

CREATE TABLE voice_finalization_status (
    thread_id   TEXT PRIMARY KEY,
    status      TEXT NOT NULL CHECK (status IN ('in_progress', 'completed', 'failed')),
    detail      TEXT,
    updated_at  TEXT NOT NULL
);
