-- name: error_rate_per_day
-- description: Refusals per UTC day and code, with that day's calls and the share they refused.
-- param: from timestamp: only entries recorded at or after this instant (inclusive)
-- param: to timestamp: only entries recorded before this instant (exclusive)
-- `code` is the entry's outcome (an error code or 'rpc:<json-rpc code>'), or 'host:<reason>'
-- for the host-level stream. Counts sum `occurrences`, so counted refusal storms weigh what
-- they counted; a summary is placed on the day it was recorded. `calls` is every audited call
-- of the day, allowed or refused; `rate` = refusals / calls.
WITH ranged AS (
    SELECT CAST(CAST(recorded_at AS TIMESTAMP) AS DATE) AS day, occurrences,
           CASE WHEN scope_ref = 'host' THEN 'host:' || reason ELSE outcome END AS code
    FROM audit_entries
    WHERE ($from IS NULL OR CAST(recorded_at AS TIMESTAMP) >= $from)
      AND ($to IS NULL OR CAST(recorded_at AS TIMESTAMP) < $to)
),
days AS (
    SELECT day, sum(occurrences) AS calls FROM ranged GROUP BY day
)
SELECT r.day, r.code, sum(r.occurrences) AS refusals, d.calls,
       round(sum(r.occurrences) / d.calls, 4) AS rate
FROM ranged r JOIN days d USING (day)
WHERE r.code <> 'ok'
GROUP BY r.day, r.code, d.calls
ORDER BY r.day, refusals DESC, r.code;
