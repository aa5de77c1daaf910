-- The procedure-doc index: every saved version is a row of its own, never changed or deleted;
-- `docs` holds each name's newest version and its tombstone; `doc_search` holds the newest version
-- of every live doc (rowid = docs.id) with its `tsvector`. Where SQLite's index is FTS5 with BM25,
-- this one is PostgreSQL's full-text search: the same columns and weights (name over title over
-- text), diacritics folded as FTS5's `remove_diacritics 2` folds them, the `simple` configuration
-- (no stemming, no stop words, as `unicode61`).
CREATE TABLE docs (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE,
    latest_version BIGINT NOT NULL CHECK (latest_version >= 1),
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL,
    removed_at     BIGINT
);

CREATE TABLE doc_versions (
    name            TEXT NOT NULL REFERENCES docs(name),
    version         BIGINT NOT NULL CHECK (version >= 1),
    text            TEXT NOT NULL,
    sha256          TEXT NOT NULL,
    bytes           BIGINT NOT NULL,
    title           TEXT NOT NULL,
    verification_id TEXT REFERENCES verifications(id),
    notebook        TEXT,
    saved_at        BIGINT NOT NULL,
    PRIMARY KEY (name, version)
);

CREATE TRIGGER doc_versions_no_update BEFORE UPDATE ON doc_versions FOR EACH ROW EXECUTE FUNCTION cairn_refuse('doc versions are never changed');
CREATE TRIGGER doc_versions_no_delete BEFORE DELETE ON doc_versions FOR EACH ROW EXECUTE FUNCTION cairn_refuse('doc versions are never deleted');

-- Lowercase, with the diacritics of Latin letters removed (no extension needed).
CREATE FUNCTION cairn_fold(t TEXT) RETURNS TEXT LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT translate(lower(t),
        'àáâãäåāăąçćĉċčďđèéêëēĕėęěĝğġģĥħìíîïĩīĭįıĵķĺļľŀłñńņňòóôõöøōŏőŕŗřśŝşšţťŧùúûüũūŭůűųŵýÿŷźżž',
        'aaaaaaaaacccccddeeeeeeeeegggghhiiiiiiiiijklllllnnnnooooooooorrrsssstttuuuuuuuuuuwyyyzzz')
$$;

CREATE TABLE doc_search (
    rowid   BIGINT PRIMARY KEY,
    name    TEXT NOT NULL,
    title   TEXT NOT NULL,
    text    TEXT NOT NULL,
    version BIGINT NOT NULL,
    tsv     tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('simple', cairn_fold(name)), 'A') ||
        setweight(to_tsvector('simple', cairn_fold(title)), 'B') ||
        setweight(to_tsvector('simple', cairn_fold(text)), 'D')) STORED
);

CREATE INDEX doc_search_tsv ON doc_search USING GIN (tsv);
