-- How many policy decisions each bundle revision made, per policy path and engine.
SELECT bundle_revision, bundle_digest, policy_path, engine_id, engine_version, count(*) AS decisions,
       min(epoch_ms(decided_at_ms)) AS first_decided, max(epoch_ms(decided_at_ms)) AS last_decided
FROM decision_receipts
GROUP BY ALL
ORDER BY first_decided, policy_path;
