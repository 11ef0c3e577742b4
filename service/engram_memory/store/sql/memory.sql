-- name: insert_candidate
INSERT INTO candidates
    (scope_ref, candidate_id, state, principal_ref, payload_digest, guard_digest, record_digest,
     record_id, capture_cursor, sealed_body, created_at_ms, updated_at_ms)
VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: get_candidate
-- Point lookups filter on their one indexed column only (an index scan needs exactly that);
-- the caller keeps the row of its own scope (see 0005_point_lookup_indexes.sql).
SELECT candidate_id, state, principal_ref, payload_digest, guard_digest, record_digest, record_id,
       capture_cursor, sealed_body, scope_ref
FROM candidates WHERE candidate_id = ?;

-- name: insert_record
INSERT INTO records
    (scope_ref, record_id, candidate_id, state, record_digest, payload_digest, guard_digest,
     recorded_cursor, accept_cursor, valid_t, valid_t_end, expires_at_ms, sealed_body, updated_at_ms)
VALUES (?, ?, ?, 'accepted_current', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: get_record
SELECT record_id, state, record_digest, payload_digest, guard_digest, recorded_cursor, accept_cursor,
       valid_t, valid_t_end, expires_at_ms, sealed_body, scope_ref
FROM records WHERE record_id = ?;

-- name: get_records
SELECT record_id, state, record_digest, payload_digest, guard_digest, recorded_cursor, accept_cursor,
       valid_t, valid_t_end, expires_at_ms, sealed_body
FROM records WHERE scope_ref = ? AND list_contains(?, record_id);

-- name: get_records_by_id
-- `$ids` is replaced by one placeholder per id (memory.get_records_by_id).
SELECT record_id, state, record_digest, payload_digest, guard_digest, recorded_cursor, accept_cursor,
       valid_t, valid_t_end, expires_at_ms, sealed_body, scope_ref
FROM records WHERE record_id IN ($ids);

-- name: set_record_state
UPDATE records SET state = ?, successor_id = ?, updated_at_ms = ? WHERE scope_ref = ? AND record_id = ?;

-- name: get_successor
SELECT successor_id, scope_ref FROM records WHERE record_id = ?;

-- name: expired_records
SELECT record_id FROM records
WHERE scope_ref = ? AND state IN ('accepted_current', 'accepted_disputed', 'historical')
  AND expires_at_ms IS NOT NULL AND expires_at_ms <= ?
ORDER BY record_id;

-- name: tombstoned_digest_match
SELECT count(*) FROM records
WHERE scope_ref = ? AND state = 'tombstoned' AND (payload_digest = ? OR guard_digest = ?);

-- name: insert_document
INSERT INTO lexical_documents (scope_ref, record_id, field_lengths_json, valid_t_end) VALUES (?, ?, ?, ?);

-- name: insert_postings
-- All of a record's postings in one statement (a ~1 MiB record has tens of thousands; row by
-- row they held the writer for seconds). Terms, fields and counts arrive as three
-- space-separated strings (hex hashes, field names, integers: none holds a space), which
-- DuckDB binds and splits far faster than three lists of that many Python strings.
INSERT INTO lexical_postings (scope_ref, term_hash, record_id, field, tf)
SELECT ?, unnest(string_split(?, ' ')), ?, unnest(string_split(?, ' ')),
       unnest(string_split(?, ' ')::INTEGER[]);

-- name: delete_document
DELETE FROM lexical_documents WHERE scope_ref = ? AND record_id = ?;

-- name: delete_vector
DELETE FROM record_vectors WHERE record_id = ? AND scope_ref = ?;

-- name: delete_postings
DELETE FROM lexical_postings WHERE scope_ref = ? AND record_id = ?;

-- name: eligible_documents
-- The visibility predicate of SPEC §8 that needs no plaintext: accepted_current, accepted and
-- recorded at or before system_as_of, valid at valid_as_of, not expired at now.
SELECT d.record_id, d.field_lengths_json, d.valid_t_end
FROM lexical_documents d JOIN records r USING (scope_ref, record_id)
WHERE d.scope_ref = ? AND r.state = 'accepted_current'
  AND r.accept_cursor <= ? AND r.recorded_cursor <= ?
  AND r.valid_t <= ? AND (r.valid_t_end IS NULL OR ? <= r.valid_t_end)
  AND (r.expires_at_ms IS NULL OR ? < r.expires_at_ms);

-- name: postings_for_terms
SELECT term_hash, record_id, field, tf FROM lexical_postings
WHERE scope_ref = ? AND list_contains(?, term_hash);

-- name: get_idempotency
SELECT tool, operation_digest, state, result_json, scope_ref, principal_ref FROM idempotency
WHERE key_digest = ?;

-- name: put_idempotency
INSERT INTO idempotency (scope_ref, principal_ref, key_digest, tool, operation_digest, state, result_json, created_at_ms)
VALUES (?, ?, ?, ?, ?, 'completed', ?, ?);

-- name: consume_confirmation
-- After the writer checked it unused in this transaction (steps.write_audits).
INSERT INTO consumed_confirmations (jti, scope_ref, tool, consumed_at_ms) VALUES (?, ?, ?, ?);



-- name: confirmation_used
SELECT count(*) FROM consumed_confirmations WHERE jti = ?;
