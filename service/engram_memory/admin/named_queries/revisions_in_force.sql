-- name: revisions_in_force
-- description: Which policy bundle revision was in force over time: each unbroken run of audited calls decided under one revision, from its first to its last call.
-- param: from timestamp: only runs still in force at this instant or later (inclusive)
-- param: to timestamp: only runs that began before this instant (exclusive)
-- A run starts at the first entry naming a revision different from the previous entry's
-- (entries without a bundle, e.g. host-stream refusals, are skipped), so a rollback to an
-- earlier revision starts a new run. `until` is when the next run began (NULL for the run
-- still in force at the export); `calls` counts entries, `refusals` those not 'ok'.
WITH bundled AS (
    SELECT sequence, CAST(recorded_at AS TIMESTAMP) AS called_at, bundle_revision, bundle_digest,
           outcome, occurrences,
           CASE WHEN bundle_revision IS DISTINCT FROM
                     lag(bundle_revision) OVER (ORDER BY sequence) THEN 1 ELSE 0 END AS starts
    FROM audit_entries
    WHERE bundle_revision <> ''
),
numbered AS (
    SELECT *, sum(starts) OVER (ORDER BY sequence) AS run FROM bundled
),
runs AS (
    SELECT run, bundle_revision, bundle_digest,
           min(sequence) AS first_sequence, max(sequence) AS last_sequence,
           min(called_at) AS in_force_from, max(called_at) AS last_call_at,
           sum(occurrences) AS calls,
           sum(CASE WHEN outcome <> 'ok' THEN occurrences ELSE 0 END) AS refusals
    FROM numbered
    GROUP BY run, bundle_revision, bundle_digest
)
SELECT bundle_revision, bundle_digest, in_force_from, last_call_at,
       lead(in_force_from) OVER (ORDER BY run) AS until,
       first_sequence, last_sequence, calls, refusals
FROM runs
QUALIFY ($from IS NULL OR until IS NULL OR until > $from)
    AND ($to IS NULL OR in_force_from < $to)
ORDER BY first_sequence;
