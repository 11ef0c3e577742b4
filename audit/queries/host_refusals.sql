-- Refusals before any binding (the host-level stream): forged, missing, expired or replayed
-- tokens, unknown tools, requests the transport or the JSON gate refused, maintenance-channel
-- refusals; per peer, transport, reason and tool, with exact counts (a summary entry counts
-- `occurrences` refusals between `first_at` and `last_at`).
SELECT peer, transport, reason, tool,
       sum(occurrences)                                AS refusals,
       count(*)                                        AS entries,
       -- first_at / last_at: TIMESTAMP or NULL in an export, '' when empty in the store
       min(coalesce(CAST(nullif(CAST(first_at AS VARCHAR), '') AS TIMESTAMP),
                    CAST(recorded_at AS TIMESTAMP)))           AS first_seen,
       max(coalesce(CAST(nullif(CAST(last_at AS VARCHAR), '') AS TIMESTAMP),
                    CAST(recorded_at AS TIMESTAMP)))           AS last_seen
FROM audit_entries
WHERE scope_ref = 'host'
GROUP BY peer, transport, reason, tool
ORDER BY refusals DESC, peer, reason, tool;
