-- name: host_refusals
-- description: Refusals before any binding (forged, missing, expired or replayed tokens, unknown tools, transport and maintenance-channel refusals) per peer, transport, reason and tool, with exact counts.
-- param: from timestamp: only entries recorded at or after this instant (inclusive)
-- param: to timestamp: only entries recorded before this instant (exclusive)
-- A summary entry counts `occurrences` refusals between first_at and last_at; the range
-- applies to when the entry was recorded.
SELECT peer, transport, reason, tool,
       sum(occurrences)                                AS refusals,
       count(*)                                        AS entries,
       min(coalesce(TRY_CAST(first_at AS TIMESTAMP), CAST(recorded_at AS TIMESTAMP))) AS first_seen,
       max(coalesce(TRY_CAST(last_at AS TIMESTAMP), CAST(recorded_at AS TIMESTAMP)))  AS last_seen
FROM audit_entries
WHERE scope_ref = 'host'
  AND ($from IS NULL OR CAST(recorded_at AS TIMESTAMP) >= $from)
  AND ($to IS NULL OR CAST(recorded_at AS TIMESTAMP) < $to)
GROUP BY peer, transport, reason, tool
ORDER BY refusals DESC, peer, reason, tool;
