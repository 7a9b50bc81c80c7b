-- Chat channels (`opencouch telegram`): the platform's update cursor per
-- channel (advanced only after the updates before it were answered, so a
-- restart neither loses nor repeats one), and per chat its owner, active
-- thread (the channel's own id), messages stored in it (rotation), whether
-- it runs incognito, the last update answered and the update whose turn is
-- running. `channel_chats` rows are owner data (forget-me deletes them).

CREATE TABLE channel_cursors (
    channel      TEXT PRIMARY KEY,
    next_offset  INTEGER NOT NULL,
    updated_at   TEXT NOT NULL
);

CREATE TABLE channel_chats (
    channel            TEXT NOT NULL,
    chat_id            TEXT NOT NULL,
    owner_id           TEXT NOT NULL,
    thread_id          TEXT NOT NULL,
    message_count      INTEGER NOT NULL DEFAULT 0 CHECK (message_count >= 0),
    incognito          INTEGER NOT NULL DEFAULT 0,
    last_update_id     INTEGER,
    pending_update_id  INTEGER,
    updated_at         TEXT NOT NULL,
    PRIMARY KEY (channel, chat_id)
);
CREATE INDEX channel_chats_owner_idx ON channel_chats (owner_id);
