-- Feedback given when a voice session ends is recorded with its own source,
-- `voice_end` (the session ended through POST /api/voice/realtime/end).
-- SQLite cannot change a CHECK constraint in place: the table is rebuilt
-- with the wider check and its rows and indexes kept.

CREATE TABLE session_feedback_new (
    insertion_order    INTEGER PRIMARY KEY AUTOINCREMENT,
    id                 TEXT NOT NULL UNIQUE,
    session_id_opaque  TEXT NOT NULL,
    user_id_or_null    TEXT,
    recorded_at        TEXT NOT NULL,
    recorded_date      TEXT NOT NULL,
    label              TEXT NOT NULL CHECK (label IN ('positive', 'negative', 'skip')),
    turn_count_at_end  INTEGER NOT NULL CHECK (turn_count_at_end >= 0),
    source             TEXT NOT NULL CHECK (source IN ('cli_end', 'cli_exit', 'api_end', 'voice_end')),
    schema_version     INTEGER NOT NULL,
    value              TEXT NOT NULL
);
INSERT INTO session_feedback_new
    (insertion_order, id, session_id_opaque, user_id_or_null, recorded_at, recorded_date, label,
     turn_count_at_end, source, schema_version, value)
SELECT insertion_order, id, session_id_opaque, user_id_or_null, recorded_at, recorded_date, label,
       turn_count_at_end, source, schema_version, value
FROM session_feedback;
DROP TABLE session_feedback;
ALTER TABLE session_feedback_new RENAME TO session_feedback;
CREATE INDEX session_feedback_session_idx ON session_feedback (session_id_opaque);
CREATE INDEX session_feedback_recorded_date_idx ON session_feedback (recorded_date);
