-- OpenCouch durable schema, PostgreSQL. Applied once at start-up by
-- `PgStores::migrate()`; request paths never issue DDL.

CREATE TABLE memory_records (
    insertion_order     BIGSERIAL PRIMARY KEY,
    id                  TEXT NOT NULL,
    owner_id            TEXT NOT NULL,
    namespace_kind      TEXT NOT NULL CHECK (namespace_kind IN ('semantic', 'episodic', 'procedural')),
    category            TEXT,
    value               JSONB NOT NULL,
    created_at          TIMESTAMPTZ NOT NULL,
    last_referenced_at  TIMESTAMPTZ,
    dormant_at          TIMESTAMPTZ,
    user_visible        BOOLEAN NOT NULL DEFAULT TRUE,
    embedding           REAL[],
    embedding_dim       INTEGER,
    embedding_model     TEXT,
    UNIQUE (id, owner_id, namespace_kind)
);
CREATE INDEX memory_records_owner_kind_idx ON memory_records (owner_id, namespace_kind);
CREATE INDEX memory_records_last_referenced_idx ON memory_records (last_referenced_at);

CREATE TABLE crisis_log (
    insertion_order           BIGSERIAL PRIMARY KEY,
    id                        TEXT NOT NULL UNIQUE,
    event_type                TEXT NOT NULL,
    session_id_opaque         TEXT NOT NULL,
    user_id_or_null           TEXT,
    detected_at               TIMESTAMPTZ NOT NULL,
    detected_date             DATE NOT NULL,
    level                     SMALLINT NOT NULL CHECK (level BETWEEN 0 AND 3),
    response_path             TEXT NOT NULL,
    retention_extended_until  TIMESTAMPTZ,
    value                     JSONB NOT NULL
);
CREATE INDEX crisis_log_detected_date_idx ON crisis_log (detected_date);
CREATE INDEX crisis_log_session_idx ON crisis_log (session_id_opaque);

CREATE TABLE session_feedback (
    insertion_order    BIGSERIAL PRIMARY KEY,
    id                 TEXT NOT NULL UNIQUE,
    session_id_opaque  TEXT NOT NULL,
    user_id_or_null    TEXT,
    recorded_at        TIMESTAMPTZ NOT NULL,
    recorded_date      DATE NOT NULL,
    label              TEXT NOT NULL CHECK (label IN ('positive', 'negative', 'skip')),
    turn_count_at_end  BIGINT NOT NULL CHECK (turn_count_at_end >= 0),
    source             TEXT NOT NULL CHECK (source IN ('cli_end', 'cli_exit', 'api_end')),
    schema_version     INTEGER NOT NULL,
    value              JSONB NOT NULL
);
CREATE INDEX session_feedback_session_idx ON session_feedback (session_id_opaque);
CREATE INDEX session_feedback_recorded_date_idx ON session_feedback (recorded_date);

CREATE TABLE thread_state (
    thread_id      TEXT PRIMARY KEY,
    updated_at     TIMESTAMPTZ NOT NULL,
    turn_count     BIGINT NOT NULL,
    message_count  BIGINT NOT NULL,
    value          JSONB NOT NULL
);
CREATE INDEX thread_state_updated_idx ON thread_state (updated_at DESC);

CREATE TABLE transcript (
    thread_id       TEXT NOT NULL,
    idx             BIGINT NOT NULL,
    role            TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
    content         TEXT NOT NULL,
    route           TEXT,
    response_style  TEXT,
    crisis_level    SMALLINT CHECK (crisis_level BETWEEN 0 AND 3),
    at              TIMESTAMPTZ,
    PRIMARY KEY (thread_id, idx)
);

CREATE TABLE active_sessions (
    thread_id                 TEXT PRIMARY KEY,
    started_at                TIMESTAMPTZ NOT NULL,
    last_active_at            TIMESTAMPTZ,
    transcript_start_index    BIGINT NOT NULL,
    max_crisis_level          SMALLINT NOT NULL CHECK (max_crisis_level BETWEEN 0 AND 3),
    session_buffer            JSONB NOT NULL,
    rotate_after_this_turn    BOOLEAN NOT NULL DEFAULT FALSE,
    finalize_required_reason  TEXT
);

CREATE TABLE voice_finalization_status (
    thread_id   TEXT PRIMARY KEY,
    status      TEXT NOT NULL CHECK (status IN ('in_progress', 'completed', 'failed')),
    detail      TEXT,
    updated_at  TIMESTAMPTZ NOT NULL
);
