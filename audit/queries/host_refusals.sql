-- Refusals before any binding (the host-level stream): forged, missing, expired or replayed
-- tokens, unknown tools, requests the transport or the JSON gate refused, maintenance-channel
-- refusals; per peer, transport, reason and tool, with exact counts (a summary entry counts
-- `occurrences` refusals between `first_at` and `last_at`).
SELECT peer, transport, reason, tool,
       sum(occurrences)                                AS refusals,
       count(*)                                        AS entries,
       min(CASE WHEN first_at <> '' THEN first_at ELSE recorded_at END) AS first_seen,
       max(CASE WHEN last_at <> '' THEN last_at ELSE recorded_at END)   AS last_seen
FROM audit_entries
WHERE scope_ref = 'host'
GROUP BY peer, transport, reason, tool
ORDER BY refusals DESC, peer, reason, tool;
