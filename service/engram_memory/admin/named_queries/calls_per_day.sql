-- name: calls_per_day
-- description: Audited calls per UTC day, allowed and refused (the report's "calls and refusals over time").
-- param: from timestamp: only entries recorded at or after this instant (inclusive)
-- param: to timestamp: only entries recorded before this instant (exclusive)
-- Counts sum `occurrences`, as error_rate_per_day does, so a counted refusal storm weighs
-- what it counted; host-level refusals (scope 'host') are calls too.
SELECT CAST(CAST(recorded_at AS TIMESTAMP) AS DATE) AS day,
       sum(occurrences) AS calls,
       sum(CASE WHEN outcome = 'ok' AND scope_ref <> 'host' THEN 0 ELSE occurrences END)
           AS refusals
FROM audit_entries
WHERE ($from IS NULL OR CAST(recorded_at AS TIMESTAMP) >= $from)
  AND ($to IS NULL OR CAST(recorded_at AS TIMESTAMP) < $to)
GROUP BY day
ORDER BY day;
