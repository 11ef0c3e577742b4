-- Who read (or tried to read) a record, when, under which bundle, and with what outcome.
-- Parameter $record_id: the record id, e.g. 'mem_...'.
-- principal_ref is sha256 of "engram-memory/principal/v1\0" + JCS("<tenant>\0<principal>"):
-- compute it for a known principal with `engram-memory audit principal-ref TENANT PRINCIPAL`.
SELECT sequence, recorded_at, tool, outcome, principal_ref, agent_ref, session_ref, bundle_revision, audit_id
FROM audit_entries
WHERE tool IN ('engram_memory_get', 'engram_memory_search')
  AND list_contains(json_extract_string(target_ids_json, '$[*]'), $record_id)
ORDER BY sequence;
