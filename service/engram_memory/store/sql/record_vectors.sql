-- The semantic channel's kept vectors (store/record_vectors.py, migration 0011).

-- name: keep_vectors
-- A batch of one scope's vectors, each written only while its record's lexical document
-- exists and no vector is kept for it yet: a record forgotten or withdrawn while its vector was
-- being computed lost its document in the tombstone's transaction, so its vector never lands.
INSERT INTO record_vectors (scope_ref, record_id, model_ref, sealed_vector, citation_keys)
SELECT $1, n.record_id, $2, n.sealed_vector, n.citation_keys
FROM (SELECT unnest($3::VARCHAR[]) AS record_id, unnest($4::BLOB[]) AS sealed_vector,
             unnest($5::VARCHAR[]) AS citation_keys) AS n
WHERE EXISTS (SELECT 1 FROM lexical_documents d
              WHERE d.scope_ref = $1 AND d.record_id = n.record_id)
  AND NOT EXISTS (SELECT 1 FROM record_vectors v
                  WHERE v.scope_ref = $1 AND v.record_id = n.record_id AND v.model_ref = $2);

-- name: drop_other_models
-- Vectors of another embedding model are useless to this one (its records are embedded
-- again): they go before its vectors are written.
DELETE FROM record_vectors WHERE scope_ref = $1 AND model_ref <> $2;

-- name: kept_vectors
-- One scope's kept vectors of indexed records (slots are the lexical index's).
SELECT v.record_id, v.sealed_vector, v.citation_keys
FROM record_vectors v JOIN lexical_documents d USING (scope_ref, record_id)
WHERE v.scope_ref = $1 AND v.model_ref = $2;

-- name: bodies_of
-- The sealed bodies of some indexed records of one scope (embedded after serving starts).
SELECT r.record_id, r.sealed_body
FROM records r JOIN lexical_documents d USING (scope_ref, record_id)
WHERE r.scope_ref = $1 AND r.sealed_body IS NOT NULL AND list_contains($2::VARCHAR[], r.record_id);
