-- The procedure-doc index: markdown docs kept by name. Every saved version is a row of its own,
-- never changed or deleted; `docs` holds each name's newest version and its tombstone; the FTS5
-- table `doc_search` holds the newest version of every live doc (rowid = docs.id). A save writes
-- the three in one transaction, so the index never shows a version that is not stored.
CREATE TABLE docs (
    id             INTEGER PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE,
    latest_version INTEGER NOT NULL CHECK (latest_version >= 1),
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    removed_at     INTEGER
) STRICT;

CREATE TABLE doc_versions (
    name            TEXT NOT NULL REFERENCES docs(name),
    version         INTEGER NOT NULL CHECK (version >= 1),
    text            TEXT NOT NULL,
    sha256          TEXT NOT NULL,
    bytes           INTEGER NOT NULL,
    title           TEXT NOT NULL,
    verification_id TEXT REFERENCES verifications(id),
    notebook        TEXT,
    saved_at        INTEGER NOT NULL,
    PRIMARY KEY (name, version)
) STRICT;

CREATE TRIGGER doc_versions_no_update BEFORE UPDATE ON doc_versions BEGIN SELECT RAISE(ABORT, 'doc versions are never changed'); END;
CREATE TRIGGER doc_versions_no_delete BEFORE DELETE ON doc_versions BEGIN SELECT RAISE(ABORT, 'doc versions are never deleted'); END;

-- Names and titles weigh more than the body: a search for a doc's subject finds that doc first.
CREATE VIRTUAL TABLE doc_search USING fts5(name, title, text, version UNINDEXED, tokenize = 'unicode61 remove_diacritics 2');
INSERT INTO doc_search (doc_search, rank) VALUES ('rank', 'bm25(10.0, 5.0, 1.0, 0.0)');
