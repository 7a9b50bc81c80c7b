-- Feedback given when a voice session ends is recorded with its own source,
-- `voice_end` (the session ended through POST /api/voice/realtime/end).

ALTER TABLE session_feedback DROP CONSTRAINT IF EXISTS session_feedback_source_check;
ALTER TABLE session_feedback ADD CONSTRAINT session_feedback_source_check
    CHECK (source IN ('cli_end', 'cli_exit', 'api_end', 'voice_end'));
