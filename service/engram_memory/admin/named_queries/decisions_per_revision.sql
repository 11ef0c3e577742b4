-- name: decisions_per_revision
-- description: How many policy decisions each bundle revision made, per policy path and engine, in a time range.
-- param: from timestamp: only decisions made at or after this instant (inclusive)
-- param: to timestamp: only decisions made before this instant (exclusive)
SELECT bundle_revision, bundle_digest, policy_path, engine_id, engine_version,
       count(*) AS decisions,
       min(epoch_ms(decided_at_ms)) AS first_decided, max(epoch_ms(decided_at_ms)) AS last_decided
FROM decision_receipts
WHERE ($from IS NULL OR epoch_ms(decided_at_ms) >= $from)
  AND ($to IS NULL OR epoch_ms(decided_at_ms) < $to)
GROUP BY ALL
ORDER BY first_decided, bundle_revision, policy_path, engine_id;
