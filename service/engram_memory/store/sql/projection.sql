-- name: position
SELECT position FROM call_log_projection WHERE id = 1;

-- name: set_position
-- In the transaction that writes the records up to it (store/projection.py).
UPDATE call_log_projection SET position = ? WHERE id = 1;

-- name: claim_audit_ids
-- Acknowledged claims, projected: the in-memory guard (core/replay_guard.py) refused any
-- replay before the record was appended, and a projection must never fail on a record the
-- log already made durable, so a conflict keeps the later expiry instead of failing.
INSERT INTO used_audit_ids (audit_id, expires_at_ms)
SELECT unnest(?::VARCHAR[]), unnest(?::BIGINT[])
ON CONFLICT (audit_id) DO UPDATE SET expires_at_ms = greatest(expires_at_ms, excluded.expires_at_ms);

-- The rows of mutations committed through the call log (store/recorded_writes.py), each
-- table in one statement per projection: column-wise lists unnested row-wise, with the
-- same meaning as the statement the tool's code gave (journal.sql `insert`, memory.sql
-- `insert_candidate` and `put_idempotency`).

-- name: insert_journal_events
INSERT INTO journal_events
    (scope_ref, cursor, event_id, operation, target_id, event_json, previous_event_hash, event_hash, intent_digest)
SELECT unnest(?::VARCHAR[]), unnest(?::UBIGINT[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
       unnest(?::VARCHAR[]);

-- name: insert_candidates
INSERT INTO candidates
    (scope_ref, candidate_id, state, principal_ref, payload_digest, guard_digest, record_digest,
     record_id, capture_cursor, sealed_body, created_at_ms, updated_at_ms)
SELECT s, c, 'pending', p, pd, gd, rd, ri, cc, sb, ca, ua FROM (
    SELECT unnest(?::VARCHAR[]) AS s, unnest(?::VARCHAR[]) AS c, unnest(?::VARCHAR[]) AS p,
           unnest(?::VARCHAR[]) AS pd, unnest(?::VARCHAR[]) AS gd, unnest(?::VARCHAR[]) AS rd,
           unnest(?::VARCHAR[]) AS ri, unnest(?::UBIGINT[]) AS cc, unnest(?::BLOB[]) AS sb,
           unnest(?::BIGINT[]) AS ca, unnest(?::BIGINT[]) AS ua);

-- name: insert_idempotency
INSERT INTO idempotency (scope_ref, principal_ref, key_digest, tool, operation_digest, state, result_json, created_at_ms)
SELECT s, p, k, t, o, 'completed', r, c FROM (
    SELECT unnest(?::VARCHAR[]) AS s, unnest(?::VARCHAR[]) AS p, unnest(?::VARCHAR[]) AS k,
           unnest(?::VARCHAR[]) AS t, unnest(?::VARCHAR[]) AS o, unnest(?::VARCHAR[]) AS r,
           unnest(?::BIGINT[]) AS c);
