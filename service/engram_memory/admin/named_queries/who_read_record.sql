-- name: who_read_record
-- description: Who read (or tried to read) one record, with get or a search that served it, with outcome and bundle.
-- param: record_id text required: the record id, e.g. mem_...
-- param: from timestamp: only entries recorded at or after this instant (inclusive)
-- param: to timestamp: only entries recorded before this instant (exclusive)
-- principal_ref is sha256 of "engram-memory/principal/v1\0" + JCS("<tenant>\0<principal>"):
-- compute it for a known principal with `engram-memory audit principal-ref TENANT PRINCIPAL`.
-- A search names in target_ids_json every record its page served or dropped (see docs/auditors/guide.md).
SELECT sequence, CAST(recorded_at AS TIMESTAMP) AS recorded_at, tool, outcome, principal_ref,
       agent_ref, session_ref, bundle_revision, audit_id
FROM audit_entries
WHERE tool IN ('engram_memory_get', 'engram_memory_search')
  AND list_contains(json_extract_string(target_ids_json, '$[*]'), $record_id)
  AND ($from IS NULL OR CAST(recorded_at AS TIMESTAMP) >= $from)
  AND ($to IS NULL OR CAST(recorded_at AS TIMESTAMP) < $to)
ORDER BY sequence;
