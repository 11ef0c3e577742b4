-- The semantic channel's vectors (core/semantic_index.py), kept so that a start loads them
-- instead of re-embedding every record (a 100k-record store took 49 s to re-embed). A vector
-- is derived from content, so it is content: it is sealed (AES-GCM under the scope's vector
-- key, a float16 vector inside, bound to scope, record and model) and deleted in the same
-- transaction as the record's lexical document, i.e. with its tombstone (store/memory.py
-- `purge_document`). A row is written only while the record's document exists
-- (store/record_vectors.py), so a vector embedded while its record was forgotten never lands.
CREATE TABLE record_vectors (
    scope_ref           VARCHAR NOT NULL,
    record_id           VARCHAR NOT NULL,
    model_ref           VARCHAR NOT NULL,       -- the embedding model that computed it
    sealed_vector       BLOB NOT NULL,
    citation_keys       VARCHAR NOT NULL        -- keyed citation hashes, space-separated
);
-- Forget and withdraw delete by record id (see 0005: one selective column is scanned).
CREATE INDEX record_vectors_record_id ON record_vectors (record_id);
