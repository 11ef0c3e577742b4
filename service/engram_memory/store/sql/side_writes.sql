-- name: staged_document
-- A record's index row whose record row does not exist (yet): staged by an admission that
-- has not committed, or left by one that failed or crashed.
SELECT count(*) FROM lexical_documents d
WHERE d.scope_ref = ? AND d.record_id = ?
  AND NOT EXISTS (
      SELECT 1 FROM records r WHERE r.scope_ref = d.scope_ref AND r.record_id = d.record_id
  );

-- name: orphan_documents
SELECT count(*) FROM lexical_documents d
WHERE NOT EXISTS (
    SELECT 1 FROM records r WHERE r.scope_ref = d.scope_ref AND r.record_id = d.record_id
);

-- name: delete_orphan_postings
DELETE FROM lexical_postings p
WHERE NOT EXISTS (
    SELECT 1 FROM records r WHERE r.scope_ref = p.scope_ref AND r.record_id = p.record_id
);

-- name: delete_orphan_documents
DELETE FROM lexical_documents d
WHERE NOT EXISTS (
    SELECT 1 FROM records r WHERE r.scope_ref = d.scope_ref AND r.record_id = d.record_id
);
