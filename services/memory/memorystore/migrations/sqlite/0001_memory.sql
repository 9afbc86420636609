-- One row, written at the first start: whether content is encrypted, with
-- which key (key_id '' = plaintext), and a value sealed with that key.
CREATE TABLE memory_keyring (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    key_id    TEXT NOT NULL,
    key_check BLOB,
    create_ms INTEGER NOT NULL
);

-- body is UTF-8 content, or nonce || AES-256-GCM ciphertext when key_id is set.
CREATE TABLE memories (
    seq        INTEGER PRIMARY KEY,
    agent_id   TEXT NOT NULL,
    memory_key TEXT NOT NULL,
    body       BLOB NOT NULL,
    key_id     TEXT NOT NULL DEFAULT '',
    create_ms  INTEGER NOT NULL,
    update_ms  INTEGER NOT NULL,
    UNIQUE (agent_id, memory_key)
);
CREATE INDEX memories_agent_updated ON memories (agent_id, update_ms DESC, seq DESC);

-- The full-text index, keyed by memories.seq. Contentless: it keeps only the
-- index terms (words, or their keyed hashes when encryption is on), never the
-- content. The service splits words itself, so no stemming or diacritic
-- folding here: matching is the same in both modes.
CREATE VIRTUAL TABLE memory_index USING fts5(
    terms,
    content = '',
    contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 0'
);
