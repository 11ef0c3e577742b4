-- name: refusals_by_reason
-- description: Refusals per reason over a time range: the error code, 'rpc:<code>' for protocol refusals, 'host:<reason>' for the host-level stream.
-- param: from timestamp: only entries recorded at or after this instant (inclusive)
-- param: to timestamp: only entries recorded before this instant (exclusive)
-- The same codes and counts as error_rate_per_day, summed over the days of the range.
SELECT CASE WHEN scope_ref = 'host' THEN 'host:' || reason ELSE outcome END AS code,
       sum(occurrences) AS refusals
FROM audit_entries
WHERE (scope_ref = 'host' OR outcome <> 'ok')
  AND ($from IS NULL OR CAST(recorded_at AS TIMESTAMP) >= $from)
  AND ($to IS NULL OR CAST(recorded_at AS TIMESTAMP) < $to)
GROUP BY code
ORDER BY refusals DESC, code;
