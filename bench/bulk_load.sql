-- Bulk load for the growth benchmark (bench/hot_path.py): accepted records with their
-- journal, candidate, idempotency, index and audit rows, straight through SQL. Parameters:
-- $1 scope_ref, $2 a tag that keeps ids unique, $3 the record count, $4 the current head.

-- name: journal
INSERT INTO journal_events
SELECT $1, $4 + i + 1, 'bulk:' || $2 || i, 'capture', 'bulk-c' || $2 || i, '{}', 'h',
       md5(i::VARCHAR), 'i'
FROM range($3) r(i);

-- name: candidates
INSERT INTO candidates
SELECT $1, 'bulk-c' || $2 || i, 'promoted', 'p', md5('d' || i), md5('g' || i), 'r',
       'bulk-r' || $2 || i, i + 1, 'x'::BLOB, 0, 0
FROM range($3) r(i);

-- name: records
INSERT INTO records
SELECT $1, 'bulk-r' || $2 || i, 'bulk-c' || $2 || i, 'accepted_current', 'r',
       md5('d' || i), md5('g' || i), i + 1, i + 1, 0, NULL, NULL, 'x'::BLOB, 0, NULL
FROM range($3) r(i);

-- name: idempotency
INSERT INTO idempotency
SELECT $1, 'p', md5($2 || i::VARCHAR), 't', 'o', 'completed', '{}', 0
FROM range($3 * 2) r(i);

-- name: documents
INSERT INTO lexical_documents
SELECT $1, 'bulk-r' || $2 || i, '{"primary": 8}', NULL FROM range($3) r(i);

-- name: postings
INSERT INTO lexical_postings
SELECT $1, md5('t' || (i % 5000)::VARCHAR), 'bulk-r' || $2 || (i // 8), 'primary', 1
FROM range($3 * 8) r(i);

-- name: audit
-- Columns named: later migrations added columns (transport, peer, confirmation evidence...)
-- with defaults, which a bare INSERT ... SELECT of the first 17 would not fill.
INSERT INTO audit_entries (sequence, recorded_at, audit_id, scope_ref, principal_ref, agent_ref,
    session_ref, tool, outcome, target_ids_json, receipt_digests_json, bundle_digest,
    bundle_revision, idempotency_key_digest, detail, previous_hash, entry_hash)
SELECT $4 + i + 1, 't', 'bulk-a' || $2 || i, $1, 'p', 'ag', 'se', 'bulk', 'ok', '[]', '[]', 'b', 'r',
       '', '', 'h', md5(i::VARCHAR)
FROM range($3 * 2) r(i);

-- name: journal_length
SELECT coalesce(max(cursor), 0) FROM journal_events WHERE scope_ref = ?;

-- name: audit_length
SELECT coalesce(max(sequence), 0) FROM audit_entries;
