-- goodput classification: every allocated GPU-second → one category (docs/goodput-model.md).
-- Statements are separated by lines of ';;'. Placeholders {name} are filled by pipeline/analyzers/run.py
-- with validated numbers (and the cluster name, checked to be a plain identifier).
-- Rows a run replaces are deleted from {delete_from[<table>]}: the table itself on one server, its local
-- tables ON CLUSTER on the cluster layout (pipeline.ddl.delete_target); reads and inserts name the table.
-- Times are epoch milliseconds (Int64) throughout; W is the window length in ms.
-- The range [{start}, {end}) (W-aligned by run.py) only selects jobs: every job whose events overlap it
-- is classified whole, from its first allocation to its last release, so a job's numbers (healthy
-- level, phases, windows) never depend on where a range starts or ends. A job still open is classified
-- up to {as_of}, the end of the data (the latest job event or GPU sample), not the range's end.
-- Sums are taken over integers (micro-seconds, nano-currency), quantiles are exact and ties are broken
-- by value, so the same input gives the same tables byte for byte.
-- A statement naming {part} runs once per part of the run's (job, GPU, window) rows (run.py ROWS_PER_PART),
-- over the nodes (nn, or a hash of the node name where nodes outside the run count too) or the jobs (jn)
-- whose number is {part} modulo {parts}: each part groups and joins only its own keys, so the statement's
-- hash tables hold a part, not the day. A part's rows depend on no other part's, so the tables are the
-- same in any number of parts.
-- Temp tables are created with ENGINE = {temp_engine} (run.py TEMP_ENGINE): in memory, compressed (a live
-- run's, of minutes, uncompressed: run.py LIVE_TEMP_ENGINE).
-- A live run ({live} = 1, run.py run_live) classifies only the windows from {live_from} on, of the jobs
-- alive then, into goodput_live: each job with the numbers its last whole run kept in job_state (2a), as
-- minutes of data cannot give them, and the rest as a whole run does. A whole run has {live} = 0 and
-- {live_from} = 0: the statements below then mean what they say without the live clauses.

-- 1. Job events of jobs alive in the range: all their events, before and after it.
CREATE OR REPLACE TABLE tmp_events ENGINE = {temp_engine} AS
SELECT job_id, toUnixTimestamp64Milli(ts) AS t, event, attempt, ifNull(account, '') AS account,
       ifNull(queue, '') AS queue, ifNull(priority, 0) AS priority, ifNull(gpus_requested, 0) AS gpus_requested,
       ifNull(node, '') AS node, gpu_indices, step, duration_ms, reason, ifNull(source, '') AS source,
       (sender, seq, batch_row) AS o  -- arrival order: orders events of the same millisecond
FROM raw_job FINAL
WHERE cluster = '{cluster}'
  AND job_id IN (
      SELECT job_id FROM raw_job WHERE cluster = '{cluster}'
      GROUP BY job_id
      HAVING min(ts) < fromUnixTimestamp64Milli(toInt64({end}))
         AND (max(ts) >= fromUnixTimestamp64Milli(toInt64({start}))
              OR countIf(event IN ('completed', 'cancelled')) = 0))
;;
-- 2. When each job ended: its completion or cancellation, or a failure with no restart after it.
CREATE OR REPLACE TABLE tmp_job_end ENGINE = {temp_engine} AS
SELECT job_id,
       multiIf(maxIf(t, event IN ('completed', 'cancelled')) > 0, maxIf(t, event IN ('completed', 'cancelled')),
               maxIf(t, event IN ('failed', 'preempted')) > maxIf(t, event = 'restarted'),
               maxIf(t, event IN ('failed', 'preempted')),
               greatest(toInt64({as_of}), max(t))) AS end_t
FROM tmp_events GROUP BY job_id
;;
-- 2a. In a live run, what each job's last whole run found and kept (state.sql): b* and sigma (8), the real
--     starts of its coarse attempts (3c), its evidence baselines (11a), its nodes' clock offsets (3a).
--     Empty in a whole run.
CREATE OR REPLACE TABLE tmp_carried ENGINE = {temp_engine} AS
SELECT job_id, kept.1 AS bh, kept.2 AS sh, kept.3 AS starts, kept.4 AS baselines, kept.5 AS clock_offsets,
       latest AS computed_at
FROM (SELECT job_id, argMax((healthy_half_keys, noise_half_keys, starts, baselines, clock_offsets), computed_at) AS kept,
             max(computed_at) AS latest
      FROM job_state
      WHERE {live} AND cluster = '{cluster}' AND job_id IN (SELECT job_id FROM tmp_events)
      GROUP BY job_id)
;;
-- 3. Allocation intervals per GPU: from `allocated` to the next `released` naming that GPU (or the whole
--    node) of the job, even after the job ended (held after completed: idle); without a release, until the
--    job's end, or the end of the range for a job still open. An `allocated` without GPU indices is an
--    allocation without placement (docs/messages.md): it holds the job's gpus_requested spread evenly over
--    the attempt's nodes (the node's GPUs where the request is unknown), and which GPUs those are comes
--    from the samples the agent tagged with the job (NVML's GPU -> process -> job), the lowest free
--    indices standing in for the rest. One owner per GPU and instant: where placed allocations of a GPU
--    overlap (a stale allocation, a fast requeue), the later allocation owns it from its start, and the
--    earlier one ends there; allocations starting in the same millisecond go to the greatest job id. The
--    later allocations are looked up among all jobs of the cluster, so the cut does not depend on the
--    range; an allocation without placement cuts no other, since nobody knows which GPUs it holds.
CREATE OR REPLACE TABLE tmp_mine ENGINE = {temp_engine} AS
WITH
unplaced AS (
    SELECT x.job_id AS job_id, x.attempt AS attempt, x.node AS node, ifNull(d.gpus_per_node, 0) AS node_gpus,
           toUInt64(if(x.req > 0, least(node_gpus, intDiv(x.req, x.n) + if(x.rank < x.req % x.n, 1, 0)),
                       node_gpus)) AS k
    FROM (
        SELECT a.job_id AS job_id, a.attempt AS attempt, a.node AS node, r.req AS req,
               count() OVER (PARTITION BY a.job_id, a.attempt) AS n,
               row_number() OVER (PARTITION BY a.job_id, a.attempt ORDER BY a.node) - 1 AS rank
        FROM (SELECT DISTINCT job_id, attempt, node FROM tmp_events WHERE event = 'allocated') AS a
        INNER JOIN (SELECT job_id, max(gpus_requested) AS req FROM tmp_events GROUP BY job_id) AS r
            ON a.job_id = r.job_id
    ) AS x LEFT JOIN dim_nodes AS d ON x.node = d.node
    SETTINGS join_use_nulls = 1
),
seen AS (
    SELECT job_id, node, arraySort(groupUniqArray(toInt32(gpu))) AS gpus
    FROM (SELECT job_id, node, gpu FROM {rollup_gpu} WHERE {rollups} AND cluster = '{cluster}'
          UNION ALL
          SELECT assumeNotNull(job_id), node, gpu FROM raw_gpu WHERE NOT {rollups} AND cluster = '{cluster}')
    WHERE job_id IN (SELECT job_id FROM tmp_events WHERE event = 'allocated' AND empty(gpu_indices))
    GROUP BY job_id, node
)
SELECT e.job_id AS job_id, e.attempt AS attempt, e.node AS node, e.t AS a0,
       toInt64(arrayJoin(if(empty(e.gpu_indices),
                            arraySlice(arrayConcat(ifNull(sn.gpus, []),
                                                   arrayFilter(x -> NOT has(ifNull(sn.gpus, []), x),
                                                               arrayMap(x -> toInt32(x), range(u.node_gpus)))),
                                       1, u.k),
                            e.gpu_indices))) AS gpu,
       empty(e.gpu_indices) AS unplaced
FROM tmp_events AS e
LEFT JOIN unplaced AS u ON e.job_id = u.job_id AND e.attempt = u.attempt AND e.node = u.node
LEFT JOIN seen AS sn ON e.job_id = sn.job_id AND e.node = sn.node
WHERE e.event = 'allocated'
SETTINGS join_use_nulls = 1
;;
-- 3, continued: where each of those allocations ends. tmp_mine (every GPU a job's `allocated` gives it, from
--    when) is a table of its own: `everyone` and `held` below read it, and as a WITH clause each reading
--    computed it again (five times, with `seen`'s read of the rollup).
CREATE OR REPLACE TABLE tmp_alloc ENGINE = {temp_engine} AS
WITH
everyone AS (
    SELECT r.job_id AS job_id, ifNull(r.node, '') AS node, toUnixTimestamp64Milli(r.ts) AS a0,
           toInt64(arrayJoin(r.gpu_indices)) AS gpu
    FROM raw_job AS r FINAL
    WHERE r.cluster = '{cluster}' AND r.event = 'allocated' AND r.node IN (SELECT node FROM tmp_mine)
      AND r.ts >= fromUnixTimestamp64Milli((SELECT min(a0) FROM tmp_mine))
),
ties AS (
    SELECT node, gpu, a0, max(job_id) AS top FROM everyone GROUP BY node, gpu, a0 HAVING uniqExact(job_id) > 1
),
rel AS (
    SELECT job_id, node, toInt64(arrayJoin(if(empty(gpu_indices), [-1], gpu_indices))) AS gpu, t
    FROM tmp_events WHERE event = 'released'
),
held AS (
    SELECT m.job_id AS job_id, m.attempt AS attempt, m.node AS node, m.gpu AS gpu, m.a0 AS a0,
           if(r.t > 0, r.t, toInt64(0)) AS rel_gpu
    FROM tmp_mine AS m ASOF LEFT JOIN (SELECT * FROM rel WHERE gpu >= 0) AS r
        ON m.job_id = r.job_id AND m.node = r.node AND m.gpu = r.gpu AND r.t >= m.a0
),
held2 AS (
    SELECT h.*, if(r.t > 0, r.t, toInt64(0)) AS rel_node
    FROM held AS h ASOF LEFT JOIN (SELECT job_id, node, t FROM rel WHERE gpu < 0) AS r
        ON h.job_id = r.job_id AND h.node = r.node AND r.t >= h.a0
),
cut AS (
    SELECT h.*, if(n.a0 > 0, n.a0, toInt64(0)) AS next_a0
    FROM held2 AS h ASOF LEFT JOIN (SELECT node, gpu, a0 FROM everyone) AS n
        ON h.node = n.node AND h.gpu = n.gpu AND n.a0 > h.a0
)
SELECT c.job_id AS job_id, c.attempt AS attempt, c.node AS node, c.gpu AS gpu, c.a0 AS a0,
       if(ifNull(tie.top, '') > c.job_id, c.a0,
          least(multiIf(c.rel_gpu > 0 AND c.rel_node > 0, least(c.rel_gpu, c.rel_node),
                        c.rel_gpu > 0, c.rel_gpu, c.rel_node > 0, c.rel_node, e.end_t),
                if(c.next_a0 > 0, c.next_a0, toInt64(9223372036854775807)))) AS a1
FROM cut AS c
LEFT JOIN tmp_job_end AS e ON c.job_id = e.job_id
LEFT JOIN ties AS tie ON c.node = tie.node AND c.gpu = tie.gpu AND c.a0 = tie.a0
SETTINGS join_use_nulls = 1
;;
-- 3a. Node clock offsets (docs/goodput-model.md, Clock skew). Job events carry the scheduler's clock; GPU
--     samples carry their node's. Each (job, node) with GPU samples the agent tagged with the job bounds
--     the node's offset: a tagged sample's second lies inside the allocation [a0, a1) by the scheduler's
--     clock, so offset >= lower = (last tagged ts) - a1 and offset <= upper = (first tagged ts - 1 s) - a0.
--     The estimate is the bound that is at least {clock_offset_ms} away from zero (lower for a clock
--     ahead, upper for one behind), where the two agree within that threshold (a tagged span longer than
--     the allocation is no evidence); otherwise 0. It is the smallest shift that puts the job's samples
--     back inside its allocation, so a correction never exceeds the true offset; per node, the (lower)
--     median of its jobs' estimates. Where the node's GPU/NIC/storage batches carry the Kafka broker's
--     append time (ingested_batches.appended) during its allocations, the broker estimate wins instead:
--     max(sent - appended), the node's offset less the fastest batch's delay (0 under the threshold).
--     Nodes with 0 are left out. Every read of raw_gpu, raw_nic and raw_storage below files a sample at
--     ts - offset ({node_offset_ms}: the row's node's offset, 0 for nodes not in tmp_clock).
CREATE OR REPLACE TABLE tmp_clock ENGINE = {temp_engine} AS
WITH
tagged AS (  -- the GPU rollup keeps each (window, job)'s first and last sample, by the node's clock
    SELECT job_id, node, min(f) AS f, max(l) AS l
    FROM (SELECT job_id, node, first_ms AS f, last_ms AS l FROM {rollup_gpu}
          WHERE {rollups} AND NOT {live} AND cluster = '{cluster}'
          UNION ALL
          SELECT assumeNotNull(job_id), node, toUnixTimestamp64Milli(ts), toUnixTimestamp64Milli(ts)
          FROM raw_gpu WHERE NOT {rollups} AND NOT {live} AND cluster = '{cluster}')
    WHERE job_id IN (SELECT job_id FROM tmp_events)
    GROUP BY job_id, node
),
held AS (SELECT job_id, node, min(a0) AS h0, max(a1) AS h1 FROM tmp_alloc WHERE a1 > a0 GROUP BY job_id, node),
est AS (
    SELECT h.job_id AS job_id, h.node AS node, t.l - h.h1 AS lower, t.f - 1000 - h.h0 AS upper,
           multiIf(lower >= {clock_offset_ms} AND lower <= upper + {clock_offset_ms}, lower,
                   upper <= -{clock_offset_ms} AND upper >= lower - {clock_offset_ms}, upper,
                   toInt64(0)) AS off
    FROM held AS h INNER JOIN tagged AS t ON h.job_id = t.job_id AND h.node = t.node
),
by_alloc AS (SELECT node, toInt64(quantileExactLow(0.5)(off)) AS off FROM est GROUP BY node),
span AS (SELECT node, min(h0) AS n0, max(h1) AS n1 FROM held GROUP BY node),
by_broker AS (
    SELECT b.node AS node, max(b.sent_ms - b.appended_ms) AS off
    FROM (SELECT node, toUnixTimestamp64Milli(sent) AS sent_ms, toUnixTimestamp64Milli(assumeNotNull(appended)) AS appended_ms
          FROM ingested_batches
          WHERE NOT {live} AND cluster = '{cluster}' AND appended IS NOT NULL AND kind IN ('gpu', 'nic', 'storage')
            AND node IN (SELECT node FROM span)) AS b
    INNER JOIN span AS s ON b.node = s.node
    WHERE b.appended_ms >= s.n0 AND b.appended_ms <= s.n1
    GROUP BY node
)
SELECT if(b.node != '', b.node, a.node) AS node,
       if(b.node != '', if(abs(b.off) >= {clock_offset_ms}, b.off, toInt64(0)), a.off) AS offset_ms,
       if(b.node != '', 'broker', 'allocation') AS method
FROM by_alloc AS a FULL OUTER JOIN by_broker AS b ON a.node = b.node
WHERE offset_ms != 0
UNION ALL  -- a live run: the offsets its jobs' last whole runs found, the latest per node
SELECT o.1 AS node, argMax(o.2, (computed_at, job_id)) AS offset_ms, 'carried' AS method
FROM tmp_carried ARRAY JOIN clock_offsets AS o
GROUP BY node
;;
-- 3b. What the run covers: the samples of its jobs' allocations (lo, hi] (read from skew ms either side,
--     the largest clock offset corrected; a live run's from {live_from}), and the days whose windows it
--     rewrites (its jobs' allocations and their windows stored before, plus the range itself).
CREATE OR REPLACE TABLE tmp_span ENGINE = {temp_engine} AS
WITH old AS (
    SELECT toInt64(min(toUnixTimestamp(window_start))) * 1000 AS o_lo,
           toInt64(max(toUnixTimestamp(window_start))) * 1000 AS o_hi, count() AS o_n
    FROM goodput_windows WHERE cluster = '{cluster}' AND job_id IN (SELECT job_id FROM tmp_events)
)
SELECT greatest(ifNull(min(a0), 0), toInt64({live_from})) AS lo, ifNull(max(a1), 0) AS hi,
       (SELECT toInt64(ifNull(max(abs(offset_ms)), 0)) FROM tmp_clock) AS skew,
       least(toInt64({start}), if(count() > 0, min(a0), toInt64({start})),
             if(any(old.o_n) > 0, any(old.o_lo), toInt64({start}))) AS day_lo,
       greatest(toInt64({end}), if(count() > 0, max(a1), toInt64({end})),
                if(any(old.o_n) > 0, any(old.o_hi), toInt64({end}))) AS day_hi
FROM tmp_alloc CROSS JOIN old
;;
-- 3c. The real start of attempts whose `running` is coarse: a scheduler (Slurm, Kubernetes) that reports it
--     when the containers start, in the same millisecond as gang_complete or from a source in {coarse_running_sources}
--     source. Then the first training step (step events: its end minus its duration) marks the start;
--     without step events, the first second at which the job's mean SM activity reaches {healthy_cutoff}
--     x the attempt's {healthy_quantile} quantile (the jump from startup to training). Neither: `running`.
--     A live run takes the starts its jobs' last whole runs found (2a) and looks only for the others'.
--     tmp_coarse holds those attempts, each until its end: a table, since tmp_start reads it seven times (as
--     a WITH clause each reading computed it again: tmp_start took 0.21-0.35 s of a live run, now 0.10 s).
CREATE OR REPLACE TABLE tmp_coarse ENGINE = {temp_engine} AS
SELECT r.job_id AS job_id, r.attempt AS attempt, r.t AS run_t,
       if(x.t > 0, x.t, greatest(toInt64({as_of}), r.t)) AS stop_t
FROM (SELECT job_id, attempt, t FROM tmp_events AS e
      WHERE event = 'running'
        AND (has({coarse_running_sources}, source)
             OR (job_id, attempt, t) IN (SELECT job_id, attempt, t FROM tmp_events WHERE event = 'gang_complete'))
     ) AS r
ASOF LEFT JOIN (SELECT job_id, t FROM tmp_events
                WHERE event IN ('failed', 'preempted', 'completed', 'cancelled')) AS x
    ON r.job_id = x.job_id AND x.t >= r.t
WHERE (r.job_id, r.attempt) NOT IN (SELECT job_id, s.1 FROM tmp_carried ARRAY JOIN starts AS s)
;;
CREATE OR REPLACE TABLE tmp_start ENGINE = {temp_engine} AS
WITH
steps AS (
    SELECT a.job_id AS job_id, a.attempt AS attempt, min(s.t0) AS first_step
    FROM tmp_coarse AS a
    INNER JOIN (SELECT job_id, attempt, toUnixTimestamp64Milli(ts) - toInt64(round(duration_ms)) AS t0
                FROM raw_step FINAL
                WHERE cluster = '{cluster}' AND job_id IN (SELECT job_id FROM tmp_coarse)
                  AND ts >= fromUnixTimestamp64Milli((SELECT min(run_t) FROM tmp_coarse))) AS s
        ON s.job_id = a.job_id
    WHERE (s.attempt IS NULL OR s.attempt = a.attempt) AND s.t0 >= a.run_t AND s.t0 < a.stop_t
    GROUP BY job_id, attempt
),
per_second AS (
    SELECT a.job_id AS job_id, a.attempt AS attempt, g.t AS t, avg(g.bm) AS mb
    FROM (SELECT node, gpu, toUnixTimestamp64Milli(ts) - {node_offset_ms} - 1 AS t,
                 toInt64(round(coalesce(sm_active_pct, util_gpu_pct) * 1000)) AS bm
          FROM raw_gpu FINAL
          WHERE cluster = '{cluster}'
            AND node IN (SELECT node FROM tmp_alloc WHERE job_id IN (SELECT job_id FROM tmp_coarse))
            AND ts > fromUnixTimestamp64Milli((SELECT min(run_t) FROM tmp_coarse) - (SELECT skew FROM tmp_span))
            AND ts <= fromUnixTimestamp64Milli((SELECT max(stop_t) FROM tmp_coarse) + (SELECT skew FROM tmp_span))) AS g
    INNER JOIN (SELECT * FROM tmp_alloc WHERE job_id IN (SELECT job_id FROM tmp_coarse)) AS al
        ON g.node = al.node AND g.gpu = al.gpu
    INNER JOIN tmp_coarse AS a ON al.job_id = a.job_id
    WHERE g.t >= al.a0 AND g.t < al.a1 AND g.t >= a.run_t AND g.t < a.stop_t AND g.bm IS NOT NULL
    GROUP BY job_id, attempt, t
),
jump AS (
    SELECT job_id, attempt, arraySort(groupArray((t, mb))) AS series, quantileExact({healthy_quantile})(mb) AS p,
           arrayFirstIndex(x -> x.2 * 1000000 >= {healthy_cutoff_ppm} * p AND p > 0, series) AS i,
           if(i > 0, series[i].1 + 1 - 1000, toInt64(0)) AS jump_t
    FROM per_second GROUP BY job_id, attempt
)
SELECT a.job_id AS job_id, a.attempt AS attempt,
       greatest(a.run_t, multiIf(ifNull(st.first_step, 0) > 0, st.first_step,
                                 ifNull(j.jump_t, 0) > 0, j.jump_t, a.run_t)) AS real_t
FROM tmp_coarse AS a
LEFT JOIN steps AS st ON a.job_id = st.job_id AND a.attempt = st.attempt
LEFT JOIN jump AS j ON a.job_id = j.job_id AND a.attempt = j.attempt
SETTINGS join_use_nulls = 1
;;
INSERT INTO tmp_start SELECT job_id, s.1, s.2 FROM tmp_carried ARRAY JOIN starts AS s
;;
-- 3d. The lifecycle the phases follow: the job events with each coarse `running` moved to its real start.
CREATE OR REPLACE TABLE tmp_lifecycle ENGINE = {temp_engine} AS
SELECT e.job_id AS job_id, if(e.event = 'running' AND s.real_t > 0, s.real_t, e.t) AS t, e.event AS event,
       e.attempt AS attempt, e.duration_ms AS duration_ms, e.reason AS reason, e.o AS o
FROM tmp_events AS e
LEFT JOIN tmp_start AS s ON e.job_id = s.job_id AND e.attempt = s.attempt
SETTINGS join_use_nulls = 1
;;
-- 3e. Nodes whose raw rows are read (FINAL, filed at ts - offset) instead of the insert-time rollups
--     (pipeline/ddl.py), per kind: the nodes with a clock offset (3a), since the rollups file samples by
--     the node's own clock, and the nodes with a duplicate in that kind's rollup over the span: a window
--     holding more rows than seconds (rows > bitCount(seconds)) counts a batch stored twice (two loaders
--     racing), which FINAL collapses in the raw rows. A batch holds one kind, so each kind's check finds
--     its own duplicates, and a kind without one reads the same sums from its rollup as from its raw rows:
--     the three lists are apart so that the GPU reads (7) need not wait for the NIC rollup's read (0.2-0.3
--     s of a live run at 10,240 GPUs; docs/performance.md: what that buys depends on idle cores). The NIC
--     rollup is read FINAL (its parts merged per key as they are read, in sort order: half the CPU of
--     grouping its 9 M keys a day), as it is read for step 9 too (tmp_nic_windows). The GPU and storage
--     rollups are read without FINAL ({gpu_duplicates}, {storage_duplicates}: run.py DUPLICATES): their
--     rows summed per (node, key) and block of 25 windows, the windows' seconds side by side in one
--     integer; the GPU's across job tags, as a second stored under two tags is a duplicate all the same,
--     and for the run's nodes only, each block one integer (run.py DUPLICATE_BLOCKS).
--     On the bench day 0.21-0.27 s for the GPU check (by the node's name and the GPU: 0.35-0.45 s; each
--     GPU's rows gathered in window order and checked window by window: 0.74-0.94 s) and 0.16-0.18 s
--     for the storage check (FINAL: 0.38-0.54 s); in a live run at 10,240 GPUs the GPU check 0.06 s (a
--     hash of its windows: 0.20-0.28 s). With {rollups}
--     = 0 (a window that is no multiple of the rollups' 10 s, or a run told to) every node is read from
--     its raw rows.
--     A live run reads the rollups' time-first copies here, in 7 and 9 where they hold the rollups' rows
--     ({<kind>_rollup_read}, run.py recent_covers): its minutes, not the day's columns.
--     The NIC rollup is read once, for this check and for step 9: its fabric signals per (node, window),
--     with whether a port's window was stored twice (tmp_nic_windows, run.py NIC_WINDOWS); in every run
--     from the time-first copy for the windows it holds, whose parts FINAL need not merge with each other
--     (run.py nic_rollup_rows).
CREATE OR REPLACE TABLE tmp_raw_gpu_nodes ENGINE = {temp_engine} AS
SELECT node FROM tmp_clock UNION DISTINCT {gpu_duplicates}
;;
CREATE OR REPLACE TABLE tmp_raw_storage_nodes ENGINE = {temp_engine} AS
SELECT node FROM tmp_clock UNION DISTINCT {storage_duplicates}
;;
CREATE OR REPLACE TABLE tmp_nic_windows ENGINE = {temp_engine} AS {nic_rollup_windows}
;;
CREATE OR REPLACE TABLE tmp_raw_nic_nodes ENGINE = {temp_engine} AS
SELECT node FROM tmp_clock
UNION DISTINCT
SELECT DISTINCT node FROM tmp_nic_windows WHERE stored_twice
;;
-- 4. Job-level phase segments. Base phases follow the lifecycle events in (time, arrival) order: events of
--    the same millisecond keep the order their source reported them (sender, seq, batch_row), never a rank
--    by event type (docs/messages.md). Two overrides apply inside
--    running time: progress lost to a failure (last checkpoint before it → the failure) is retry
--    waste, and a checkpoint save (its end minus its duration → its end) is checkpoint time.
CREATE OR REPLACE TABLE tmp_segments ENGINE = {temp_engine} AS
WITH
base AS (
    SELECT job_id, arraySort(x -> (x.1, x.2), groupArray((t, o, phase, reason))) AS b
    FROM (
        SELECT job_id, t, (1, o) AS o,
               multiIf(event = 'gang_complete', if(attempt = 1, 'startup', 'retry_waste'),
                       event = 'running', 'run',
                       event IN ('completed', 'cancelled'), 'idle',
                       event IN ('failed', 'preempted') AND t >= end_t, 'idle',
                       'retry_waste') AS phase,
               multiIf(event IN ('failed', 'preempted') AND t >= end_t,
                       concat('held after ', event, ': ', ifNull(reason, event)),
                       event IN ('failed', 'preempted'), concat('restart after ', ifNull(reason, event)),
                       event IN ('completed', 'cancelled'), concat('held after ', event),
                       event = 'gang_complete' AND attempt = 1, 'first attempt startup',
                       event = 'running', 'running', '') AS reason
        FROM tmp_lifecycle INNER JOIN tmp_job_end USING (job_id)
        WHERE event IN ('gang_complete', 'running', 'failed', 'preempted', 'restarted', 'completed', 'cancelled')
        UNION ALL
        SELECT job_id, min(t), (0, ('', toUInt64(0), toUInt32(0))), 'gang_wait', 'gang incomplete' FROM tmp_lifecycle
        WHERE event = 'allocated' GROUP BY job_id
    ) GROUP BY job_id
),
attempts AS (
    SELECT job_id, attempt, minIf(t, event = 'running') AS running_t,
           groupArrayIf(t, event = 'checkpoint_saved') AS ckpts
    FROM tmp_lifecycle GROUP BY job_id, attempt
),
lost AS (
    SELECT job_id, groupArray((c, f, why)) AS l FROM (
        SELECT f.job_id AS job_id, f.t AS f, concat('lost progress: ', f.why) AS why,
               if(notEmpty(arrayFilter(x -> x <= f.t, a.ckpts)), arrayMax(arrayFilter(x -> x <= f.t, a.ckpts)),
                  a.running_t) AS c
        FROM (SELECT job_id, attempt, t, ifNull(reason, event) AS why FROM tmp_lifecycle
              WHERE event IN ('failed', 'preempted')) AS f
        INNER JOIN attempts AS a ON f.job_id = a.job_id AND f.attempt = a.attempt
        WHERE a.running_t > 0 AND a.running_t <= f.t
    ) WHERE c < f GROUP BY job_id
),
ckpt AS (
    SELECT job_id, groupArray((t - toInt64(ifNull(duration_ms, 0)), t)) AS k
    FROM tmp_lifecycle WHERE event = 'checkpoint_saved' GROUP BY job_id
),
points AS (
    SELECT job_id, b, l, k,
           arraySort(arrayDistinct(arrayConcat(arrayMap(x -> x.1, b), arrayMap(x -> x.1, l), arrayMap(x -> x.2, l),
                                               arrayMap(x -> x.1, k), arrayMap(x -> x.2, k), [greatest(toInt64({as_of}),
                                               arrayMax(arrayMap(x -> x.1, b)))]))) AS pts,
           arrayFill(x -> x != '', arrayMap(x -> x.4, b)) AS reasons
    FROM base LEFT JOIN lost USING (job_id) LEFT JOIN ckpt USING (job_id)
)
SELECT job_id, seg.1 AS s0, seg.2 AS s1, seg.3 AS phase, seg.4 AS evidence
FROM points
ARRAY JOIN arrayMap(i -> (
    pts[i], pts[i + 1],
    if(b[arrayLastIndex(x -> x.1 <= pts[i], b)].3 = 'run',
       multiIf(arrayFirstIndex(x -> x.1 <= pts[i] AND pts[i] < x.2, l) > 0, 'retry_waste',
               arrayExists(x -> x.1 <= pts[i] AND pts[i] < x.2, k), 'checkpoint', 'run'),
       b[arrayLastIndex(x -> x.1 <= pts[i], b)].3),
    if(b[arrayLastIndex(x -> x.1 <= pts[i], b)].3 = 'run',
       multiIf(arrayFirstIndex(x -> x.1 <= pts[i] AND pts[i] < x.2, l) > 0,
               l[arrayFirstIndex(x -> x.1 <= pts[i] AND pts[i] < x.2, l)].3,
               arrayExists(x -> x.1 <= pts[i] AND pts[i] < x.2, k), 'checkpoint save', ''),
       reasons[arrayLastIndex(x -> x.1 <= pts[i], b)])
), arrayFilter(i -> arrayLastIndex(x -> x.1 <= pts[i], b) > 0, range(1, toUInt64(length(pts))))) AS seg
WHERE s0 < s1
;;
-- 5. Slots: one number per (job, node, GPU) the run allocates, in their order, with its job's number (jn)
--    and its node's (nn). The tables with a row per (job, GPU, window) are grouped and joined on these
--    integers: they hash about six times faster than the job id and node names (measured on the bench
--    day: bench/bench_analyze.py). tmp_pieces carries the names too; tmp_piece_windows, tmp_run_hits,
--    tmp_loss, tmp_run_split and tmp_classified only the numbers (and the GPU index), and the names are
--    looked up where they are needed (8, 10, 10c, 11b, 13, stragglers.sql). Their strings (phase, category,
--    reasons) are LowCardinality: a few distinct values, '' in most rows, so a byte a row and a dictionary
--    per block instead of the string (tmp_piece_windows 422 -> 269 MB, tmp_run_split 724 -> 571 MB,
--    tmp_classified 526 -> 261 MB on the bench day).
CREATE OR REPLACE TABLE tmp_slots ENGINE = {temp_engine} AS
SELECT job_id, node, gpu, toUInt32(row_number() OVER (ORDER BY job_id, node, gpu)) AS slot,
       toUInt32(dense_rank() OVER (ORDER BY job_id)) AS jn, toUInt32(dense_rank() OVER (ORDER BY node)) AS nn
FROM (SELECT DISTINCT job_id, node, gpu FROM tmp_alloc)
;;
-- The names of the numbers, one row each: the readers of 8, 9, 10, 10c, 11b and 13 look them up here.
CREATE OR REPLACE TABLE tmp_job_numbers ENGINE = {temp_engine} AS SELECT DISTINCT jn, job_id FROM tmp_slots
;;
CREATE OR REPLACE TABLE tmp_node_numbers ENGINE = {temp_engine} AS SELECT DISTINCT nn, node FROM tmp_slots
;;
-- 5a. Pieces: one GPU's allocation intersected with one segment (in a live run, from {live_from} on).
CREATE OR REPLACE TABLE tmp_pieces ENGINE = {temp_engine} AS
SELECT a.job_id AS job_id, a.node AS node, a.gpu AS gpu, n.slot AS slot, n.jn AS jn, n.nn AS nn, s.phase AS phase,
       s.evidence AS evidence, greatest(a.a0, s.s0, toInt64({live_from})) AS o0, least(a.a1, s.s1) AS o1
FROM tmp_alloc AS a INNER JOIN tmp_segments AS s ON a.job_id = s.job_id
INNER JOIN tmp_slots AS n ON a.job_id = n.job_id AND a.node = n.node AND a.gpu = n.gpu
WHERE o0 < o1
;;
-- 6. Pieces cut into windows, with the seconds each window holds. From here on the tables with a row per
--    (job, GPU, window) carry the numbers of step 5, not the names: they are joined back where needed.
CREATE OR REPLACE TABLE tmp_piece_windows ENGINE = {temp_engine} AS
SELECT slot, jn, nn, toLowCardinality(phase) AS phase, toLowCardinality(evidence) AS evidence, wi,
       (least(o1, (wi + 1) * {W}) - greatest(o0, wi * {W})) / 1000.0 AS secs
FROM tmp_pieces
ARRAY JOIN range(toInt64(intDiv(o0, {W})), toInt64(intDiv(o1 - 1, {W}) + 1)) AS wi
;;
-- 7. GPU busy level per (job, GPU, window), from the samples inside running pieces only, so that a
--    window half in startup does not dilute the running half. A sample with ts T describes the second
--    (T-1s, T]: it is filed at t = T - 1 ms, in the window and piece holding that instant. Read from the
--    GPU rollup (10 s rows summed at insert time; 3e says for which nodes) or from the same sums over the
--    raw rows: a window wholly inside a running piece takes its rows' sums; a window a piece boundary cuts
--    (a start, an end, a checkpoint) sums the samples it keeps on the piece's side. Busy levels are summed
--    as integers (milli-percent); `keys` are the samples' levels at 0.01 %, for the exact quantiles (8, 11):
--    0-10,000, as the message schema bounds a percent, so UInt16. The job and node numbers ride along from
--    the pieces, so no join puts the names back (the table: 0.92 -> 0.74 GB on the bench day).
--    Each window of a running piece is a row per rollup row it meets (tmp_run_hits); the readers that
--    need one row per (job, GPU, window) read them through {run_gpu} (run.py RUN_GPU), which sums only
--    the windows that need it. Most do not: a rollup row holding all 10 seconds of its window is the only
--    row of its (node, GPU, window) (`alone`, {gpu_windows}): any other, of another job tag or in another
--    part, would hold one of those seconds again, which step 3e finds (more rows than seconds) and sends
--    the node to its raw rows; and a window wholly inside a running piece meets no other piece of its
--    slot, as a GPU's allocations and a job's segments do not overlap. Only the other rows (the windows a
--    piece boundary cuts, a job tag changing, seconds missing: 1.4 % on the bench day) are grouped. A
--    group of every row was 0.6 s of each part's 1.75 s on the bench day, and a table of the summed rows
--    0.55-0.60 s more to write (docs/performance.md); the readers that only sum per job or window read
--    the rows themselves (8, 10, 10c's episodes).
CREATE OR REPLACE TABLE tmp_run_hits ENGINE = {temp_engine} AS
WITH
rolled AS (  -- keyed as `runs` below: (node number, GPU, stretch) in one integer
    SELECT *, bitOr(bitShiftLeft(toUInt64(nn), 40),
                    bitOr(bitShiftLeft(toUInt64(gpu), 32), toUInt64(intDiv(wi, 30)))) AS k
    FROM (SELECT *, transform(node, (SELECT groupArray(node) FROM tmp_node_numbers),
                              (SELECT groupArray(nn) FROM tmp_node_numbers), toUInt32(0)) AS nn
          FROM ({gpu_windows}))
    WHERE nn > 0 AND nn % {parts} = {part}  -- a node of the run (numbered from 1), of this part
),
runs AS (  -- each running piece once per stretch of 30 windows it touches: the join below meets a window
          -- with the few pieces of its stretch, not every piece of its GPU in the run. Its key packs the
          -- node number (< 2^24), the GPU index (0-63, docs/messages.md) and the stretch (< 2^32 at a 1 s
          -- window): one UInt64 hashes faster than the three (2.57-2.91 -> 2.25-2.65 s on the bench day).
    SELECT slot, jn, nn, gpu, o0, o1,
           arrayJoin(range(intDiv(intDiv(o0, {W}), 30), intDiv(intDiv(o1 - 1, {W}), 30) + 1)) AS stretch,
           bitOr(bitShiftLeft(toUInt64(nn), 40),
                 bitOr(bitShiftLeft(toUInt64(gpu), 32), toUInt64(stretch))) AS k
    FROM tmp_pieces WHERE phase = 'run' AND nn % {parts} = {part}
),
hit AS (  -- each window of a running piece, read once: whole inside the piece, or cut by its start or end
    SELECT p.slot AS slot, p.jn AS jn, p.nn AS nn, p.gpu AS gpu, r.wi AS wi,
           r.ws >= p.o0 AND r.ws + {W} <= p.o1 AS whole, whole AND r.alone AS alone,
           if(whole, r.samples, arrayFilter(x -> r.ws + x.1 >= p.o0 AND r.ws + x.1 < p.o1, r.samples)) AS kept,
           if(whole, r.n, toUInt64(length(kept))) AS n, if(whole, r.bsum, arraySum(x -> x.2, kept)) AS bsum,
           if(whole, r.thr, arrayFold((acc, x) -> bitOr(acc, x.3), kept, toInt64(0))) AS thr,
           arrayMap(x -> toUInt16(round(x.2 / 10)), kept) AS keys
    FROM rolled AS r INNER JOIN runs AS p ON r.k = p.k
    WHERE r.ws < p.o1 AND r.ws + {W} > p.o0
)
SELECT slot, jn, nn, gpu, wi, n, bsum, thr, keys, alone FROM hit
;;
-- 8. Each job's healthy level b*, from its own one-second running samples (seconds, not windows: a
--    job stalled most of the time still has productive seconds that show its level), exact on the 0.01 %
--    histogram: first p = the {healthy_quantile} quantile (the sample of rank ceil(q n)); the seconds at
--    or above {healthy_cutoff} x p are the healthy ones; b* is the middle of their shortest half (the
--    narrowest range of levels holding half of them, ties to the lowest). Their median would be biased
--    high by the cut through the noise below; the densest half sits on the level itself.
--    The job's sample noise sigma is read off the healthy seconds above b*, which no stall reaches: the
--    value exceeded by 0.3173 of them (P(Z > 1) / P(Z > 0) for normal noise) minus b*.
--    A live run takes both from the job's last whole run (2a) where that saw it run, as minutes of data
--    say little of a job's level: a job stalled for the last ten minutes would have the stall as b*.
CREATE OR REPLACE TABLE tmp_healthy_hist ENGINE = {temp_engine} AS
SELECT job_id, jn, ks, c0, cs, n, i0, cs[i0] - c0[i0] AS before, n - before AS m,
       sum_b / n_all / 1000 AS b_mean
FROM (
    SELECT k.job_id AS job_id, h.jn AS jn, h.ks AS ks, h.c0 AS c0, arrayCumSum(c0) AS cs, cs[-1] AS n,
           ks[arrayFirstIndex(x -> x >= toUInt64(ceil(round({healthy_quantile} * n, 6))), cs)] AS p,
           arrayFirstIndex(k -> k * 1000000 >= {healthy_cutoff_ppm} * p, ks) AS i0, t.sum_b AS sum_b, t.n_all AS n_all
    FROM (SELECT jn, arraySort(groupArray((key, c))) AS h, arrayMap(x -> x.1, h) AS ks, arrayMap(x -> x.2, h) AS c0
          FROM (SELECT jn, key, count() AS c FROM tmp_run_hits ARRAY JOIN keys AS key
                WHERE jn NOT IN (SELECT k.jn FROM tmp_job_numbers AS k INNER JOIN tmp_carried AS c
                                     ON k.job_id = c.job_id WHERE c.bh > 0)
                GROUP BY jn, key)
          GROUP BY jn) AS h
    INNER JOIN (SELECT jn, sum(bsum) AS sum_b, sum(n) AS n_all FROM tmp_run_hits GROUP BY jn) AS t ON h.jn = t.jn
    INNER JOIN tmp_job_numbers AS k ON h.jn = k.jn
)
;;
CREATE OR REPLACE TABLE tmp_healthy ENGINE = {temp_engine} AS
WITH levels AS (  -- one row per healthy level: seconds below it, and up to and including it
    SELECT job_id, ks[i] AS key, cs[i] - c0[i] - before AS below, cs[i] - before AS upto,
           below + intDiv(m + 1, 2) AS half_end
    FROM tmp_healthy_hist ARRAY JOIN arrayEnumerate(ks) AS i
    WHERE i >= i0
),
shortest AS (  -- twice the middle, in keys (0.005 % steps), an integer as the keys are
    SELECT lo.job_id AS job_id, argMin(toInt64(lo.key) + hi.key, (hi.key - lo.key, lo.key)) AS mid2
    FROM levels AS lo ASOF INNER JOIN levels AS hi ON lo.job_id = hi.job_id AND lo.half_end <= hi.upto
    GROUP BY lo.job_id
)
SELECT h.job_id AS job_id, h.jn AS jn, s.mid2 / 200 AS b_star, h.b_mean AS b_mean,
       arrayFirstIndex(k -> 2 * k >= s.mid2, h.ks) AS i_star,
       h.n - (h.cs[i_star] - h.c0[i_star]) AS n_up,
       2 * toInt64(h.ks[arrayFirstIndex(x -> x >= h.n - toUInt64(ceil(0.3173 * n_up)) + 1, h.cs)]) - s.mid2 AS sh,
       sh / 200 AS sigma,
       greatest(s.mid2, 1) AS bh  -- b* for 10c and 11, which decide in integers; a job whose level is 0
                                  -- (it never did anything) at 0.005 %, so its running time is lost
FROM tmp_healthy_hist AS h INNER JOIN shortest AS s ON h.job_id = s.job_id
;;
INSERT INTO tmp_healthy (job_id, jn, b_star, sh, sigma, bh)
SELECT c.job_id, k.jn, c.bh / 200, c.sh, c.sh / 200, c.bh
FROM tmp_carried AS c INNER JOIN tmp_job_numbers AS k ON c.job_id = k.job_id
WHERE c.bh > 0
;;
-- 9. Evidence strength per (node, window): each signal over its threshold, so 1 is the threshold and the
--    strongest signal of a kind counts. Storage: the node's own I/O pressure, or its pool's storage read
--    rate over the ceiling *if* this node is among those reading it (at least {storage_reader_fraction} of the pool's mean read
--    rate per node: a job starved by another reads less than the hog, but not nothing), so a pool at its
--    ceiling does not mark the nodes of jobs that hardly read. Fabric: congestion on any port of the node
--    (xmit_wait, ECN marks, CNPs sent or handled) or transmit against line rate. Step 11 decides what is
--    evidence (at or above threshold, or risen with the stall: 11a); a strength is kept in millionths of
--    its threshold (an integer, capped at 1e12 thresholds), so 11b decides at its thresholds exactly: in
--    floats, 0.6 against 3 x 0.2 (a signal risen exactly evidence_rise x) was under. Read from the NIC
--    and storage rollups or the same sums over the raw rows (3e); rates are averaged from integer sums
--    (milli-units). Each
--    node's storage per window first (tmp_node_storage), as both the pool's sum and the node's own
--    signal read it; the fabric signals per (node, window) from tmp_nic_windows (3e) or the raw rows.
--    A node's read rate divides by its distinct sample times over its mounts: the window's times gathered
--    in one array and counted distinct (a window holds a few dozen): a uniqExact hash set per node and
--    window took 1.5x the time (0.27 against 0.18 s a part on the bench day), a set's array 2.4x.
--    What 11b's reasons say is kept as numbers (which signal of each kind is strongest, the pool's share
--    of its ceiling, the I/O pressure), and 11b writes the words only for the seconds it loses: carried
--    as strings through 11b's join of every running window, the two reasons cost 0.3 s on the bench day.
CREATE OR REPLACE TABLE tmp_node_storage ENGINE = {temp_engine} AS
SELECT node, wi,
       sumIf(read_sum, source IN ('nfs', 'lustre'))
           / greatest(1, length(arrayDistinct(groupArrayArrayIf(arrayMap(x -> ws + x, times),
                                                                 source IN ('nfs', 'lustre')))))
           AS read_rate,
       maxIf(psi_max, source = 'psi') AS psi
FROM (
    SELECT node, source, toInt64(toUnixTimestamp(window_start)) * 1000 AS ws, intDiv(ws, {W}) AS wi, read_sum,
           psi_max, times
    FROM {storage_rollup_read}
    WHERE cluster = '{cluster}' AND {rollups} AND node NOT IN (SELECT node FROM tmp_raw_storage_nodes)
      AND {rollup_span}
    UNION ALL
    SELECT node, source, toInt64(toUnixTimestamp(window_start)) * 1000 AS ws, intDiv(ws, {W}), read_sum,
           psi_max, times
    FROM ({raw_storage_windows})
)
WHERE cityHash64(node) % {parts} = {part}
GROUP BY node, wi
;;
--    The evidence is kept for the nodes of the run only (11a and 11b read it by node number), and the
--    storage and fabric windows meet on one integer, the node's number and the window packed (a window
--    number < 2^32 at any W of 1 s or more until 2106): on their names and windows as two keys, with
--    the pool and the number looked up by name, the statement took 0.66-0.67 s of the bench day against
--    0.36-0.38 s (the pools' sums still read every node's storage, in or out of the run).
CREATE OR REPLACE TABLE tmp_node_evidence ENGINE = {temp_engine} AS
WITH
(SELECT (groupArray(k.nn), groupArray(k.node), groupArray(ifNull(d.pool, '')))  -- each node's number, pool
 FROM tmp_node_numbers AS k LEFT JOIN dim_nodes AS d ON k.node = d.node SETTINGS join_use_nulls = 1) AS nodes,
pool_storage AS (
    SELECT d.pool AS pool, s.wi AS wi, sum(s.read_rate) / any(p.storage_ceiling_bytes_per_s) AS ratio,
           sum(s.read_rate) / greatest(1, any(p.nodes)) AS mean_read
    FROM tmp_node_storage AS s INNER JOIN dim_nodes AS d ON s.node = d.node
    INNER JOIN dim_pools AS p ON d.pool = p.pool
    GROUP BY pool, wi
),
net AS (
    SELECT node, wi, xmit_wait, ecn, cnp, line_frac FROM tmp_nic_windows
    WHERE node NOT IN (SELECT node FROM tmp_raw_nic_nodes)
    UNION ALL
    SELECT node, wi, xmit_wait, ecn, cnp, line_frac FROM ({nic_raw_windows})
),
storage_windows AS (
    SELECT transform(node, nodes.2, nodes.1, toUInt32(0)) AS nn, wi, read_rate, psi,
           bitOr(bitShiftLeft(toUInt64(nn), 32), toUInt64(wi)) AS key
    FROM tmp_node_storage WHERE nn > 0
),
net_windows AS (
    SELECT transform(node, nodes.2, nodes.1, toUInt32(0)) AS nn, wi, xmit_wait, ecn, cnp, line_frac,
           bitOr(bitShiftLeft(toUInt64(nn), 32), toUInt64(wi)) AS key
    FROM net WHERE nn > 0
)
SELECT nn, wi, toInt64(round(least(greatest(s_pool, s_psi), 1e12) * 1000000)) AS s_d,
       toInt64(round(least(greatest(s_congestion, s_line), 1e12) * 1000000)) AS s_c,
       s_pool >= s_psi AS by_pool, round(pool_ratio * 100) AS pool_pct, round(psi) AS psi_pct,
       s_congestion >= s_line AS by_congestion
FROM (
    SELECT coalesce(s.nn, n.nn) AS nn, coalesce(s.wi, n.wi) AS wi,
           ifNull(ps.ratio, 0) AS pool_ratio, ifNull(s.psi, 0) AS psi,
           if(ifNull(s.read_rate, 0) > 0 AND ifNull(s.read_rate, 0) >= {storage_reader_fraction} * ps.mean_read,
              pool_ratio / {storage_saturation}, 0) AS s_pool,
           psi / greatest({psi_some_pct}, 1e-9) AS s_psi,
           greatest(ifNull(n.xmit_wait, 0) / greatest({xmit_wait_per_s}, 1e-9),
                    ifNull(n.ecn, 0) / greatest({ecn_marked_per_s}, 1e-9),
                    ifNull(n.cnp, 0) / greatest({cnp_per_s}, 1e-9)) AS s_congestion,
           ifNull(n.line_frac, 0) / {nic_line_rate_fraction} AS s_line
    FROM storage_windows AS s
    FULL OUTER JOIN net_windows AS n ON s.key = n.key
    LEFT JOIN pool_storage AS ps ON transform(coalesce(s.nn, n.nn), nodes.1, nodes.3, '') = ps.pool
                                    AND coalesce(s.wi, n.wi) = ps.wi
)
SETTINGS join_use_nulls = 1
;;
-- 10. Stragglers per (job, window): a GPU of the job under a hardware/thermal clock event.
CREATE OR REPLACE TABLE tmp_stragglers ENGINE = {temp_engine} AS
SELECT j.job_id AS job_id, s.jn AS jn, s.wi AS wi, concat('straggler ', k.node, ' GPU ', toString(s.first.2)) AS why
FROM (SELECT jn, wi, arraySort(groupArray((nn, gpu)))[1] AS first  -- nn: in node order
      FROM tmp_run_hits WHERE bitAnd(thr, {straggler_mask}) != 0 GROUP BY jn, wi) AS s
INNER JOIN tmp_job_numbers AS j ON s.jn = j.jn
INNER JOIN tmp_node_numbers AS k ON s.first.1 = k.nn
;;
-- 10a. The training loop's own account, where ranks report step events: per (job, window), the share of
--    the reporting ranks' step time spent waiting for data and for communication *beyond the job's
--    usual* (its lower quartile per step: a healthy step also reads a little and overlaps some comm),
--    each step's time prorated over the windows it spans. A synchronous gang waits together, so it
--    stands for the job's ranks that do not report.
CREATE OR REPLACE TABLE tmp_step_split ENGINE = {temp_engine} AS
WITH
steps AS (
    SELECT job_id, rank, toUnixTimestamp64Milli(ts) - {node_offset_ms} AS t1,
           greatest(toInt64(round(duration_ms)), 1) AS d, t1 - d AS t0,
           ifNull(data_ms, 0) / d AS fd, ifNull(comm_ms, 0) / d AS fc
    FROM raw_step FINAL
    WHERE cluster = '{cluster}' AND job_id IN (SELECT job_id FROM tmp_events) AND duration_ms > 0
      AND ts > fromUnixTimestamp64Milli((SELECT lo - skew FROM tmp_span))
      AND ts <= fromUnixTimestamp64Milli((SELECT hi + skew FROM tmp_span))
),
usual AS (
    SELECT job_id, quantileExactLow(0.25)(fd) AS ud, quantileExactLow(0.25)(fc) AS uc FROM steps GROUP BY job_id
),
excess AS (
    SELECT s.job_id AS job_id, s.rank AS rank, s.t0 AS t0, s.t1 AS t1,
           greatest(0.0, s.fd - u.ud) AS xd, greatest(0.0, s.fc - u.uc) AS xc
    FROM steps AS s INNER JOIN usual AS u ON s.job_id = u.job_id
)
SELECT job_id, wi, sum(ov * xd) / sum(ov) AS f_data, sum(ov * xc) / sum(ov) AS f_comm,
       uniqExact(rank) AS ranks
FROM (
    SELECT job_id, rank, xd, xc, wi, least(t1, (wi + 1) * {W}) - greatest(t0, wi * {W}) AS ov
    FROM excess
    ARRAY JOIN range(toInt64(intDiv(t0, {W})), toInt64(intDiv(t1 - 1, {W}) + 1)) AS wi
)
GROUP BY job_id, wi
;;
-- 10b. Stragglers from step events (compare nvidia-resiliency-ext: gang median / rank median compute).
--    Per step, the gang's median compute time; per (job, rank, window of its steps' ends) the rank's
--    median ratio to it. A window's straggler is its slowest rank at least {straggler_min_slowdown} over
--    the median (ties to the lowest rank): a synchronous gang waits for it at every collective, so a
--    rank persistently 5 % slower costs every other GPU 5 %. Consecutive windows of the same straggler
--    are an episode, kept with at least {straggler_min_steps} steps, so one noisy step (or a few) is
--    not one; the medians keep ranks whose differences are noise under the threshold.
CREATE OR REPLACE TABLE tmp_straggler_windows ENGINE = {temp_engine} AS
WITH
steps AS (
    SELECT job_id, ifNull(attempt, 0) AS attempt, step, rank, node, toInt32(ifNull(gpu, -1)) AS gpu,
           toUnixTimestamp64Milli(ts) - {node_offset_ms} AS t1, toFloat64(duration_ms) AS d,
           toFloat64(compute_ms) AS c
    FROM raw_step FINAL
    WHERE cluster = '{cluster}' AND job_id IN (SELECT job_id FROM tmp_events) AND compute_ms > 0
      AND duration_ms > 0
      AND ts > fromUnixTimestamp64Milli((SELECT lo - skew FROM tmp_span))
      AND ts <= fromUnixTimestamp64Milli((SELECT hi + skew FROM tmp_span))
),
gang AS (
    SELECT job_id, attempt, step, quantileExactLow(0.5)(c) AS m FROM steps
    GROUP BY job_id, attempt, step HAVING count() >= 2
),
per_rank AS (
    SELECT s.job_id AS job_id, s.rank AS rank, any(s.node) AS node, any(s.gpu) AS gpu, intDiv(s.t1 - 1, {W}) AS wi,
           quantileExactLow(0.5)(s.c / g.m) AS ratio, count() AS steps, sum(s.c - g.m) AS extra_ms, sum(s.d) AS step_ms
    FROM steps AS s INNER JOIN gang AS g ON s.job_id = g.job_id AND s.attempt = g.attempt AND s.step = g.step
    GROUP BY job_id, rank, wi
)
SELECT job_id, wi, 'steps' AS src, toInt64(w.1) AS rank, toString(w.2) AS node, toInt32(w.3) AS gpu,
       toFloat64(w.4) AS ratio, toUInt64(w.5) AS steps, toFloat64(greatest(0.0, w.6 / w.7)) AS f_wait
FROM (
    SELECT job_id, wi, argMax((rank, node, gpu, ratio, steps, extra_ms, step_ms), (ratio, -rank)) AS w
    FROM per_rank GROUP BY job_id, wi
)
WHERE ratio >= {straggler_min_ratio}  -- the decimal 1 + slowdown: 1 + 0.14 in floats is over 1.14
;;
-- 10c. Stragglers from SM activity, for jobs without step events (the GPU signals say who arrives last at
--    each collective): in a synchronous gang the straggler computes flat out while the others wait for it,
--    so per (job, window) its GPU is the busiest, at the job's healthy level b*, and the gang's median GPU
--    is busy only (rank compute / straggler compute) of the time: ratio = busiest / median mean busy level,
--    the same ratio 10b takes from the steps. A window has one when the busiest GPU is at b* (within the
--    tolerance of 11), at least {straggler_min_slowdown} and more than {noise_z} x the noise of the
--    difference of two window means above the median, the median is live (not under the dead level of 11,
--    nor 0: GPUs that do nothing wait for no one), and the GPUs within that noise of the busiest or closer
--    to it than to the median -- the straggler's -- are fewer than the rest and on one node (a whole node
--    straggling is reported as the node, GPU -1). Half a gang busy and half waiting is a stall of that
--    half, not a straggler. The noise of a window mean is read off the spread of the gang's means in that
--    window (1.4826 x their median absolute deviation): the job's sigma of 8 counts a persistent
--    straggler's seconds as noise, as b* then sits at the waiting level. Episodes need
--    {straggler_min_windows} windows. Each comparison but the noise's is exact, in integers (a mean as its
--    milli-% sum over its seconds, cross-multiplied; b* and sigma in half keys: run.py's at_healthy_level).
--    The windows where one can be are found first from the means alone (`spread`), and only theirs are
--    ranked with the GPUs' names and sums: a sixth of a day's windows pass the slowdown, fewer the noise
--    band, and ranking every window was 2.6x the time of the statement (bench/bench_analyze.py). Both tests
--    are necessary conditions of the ones below: the band's is the same expression over the same means,
--    the slowdown's the exact test's in floats, loosened by 1e-9 (far above their rounding).
INSERT INTO tmp_straggler_windows
WITH
spread AS (
    SELECT jn, wi FROM (
        SELECT jn, wi, count() AS gpus, arraySort(groupArray(b)) AS levels, levels[intDiv(gpus + 1, 2)] AS m
        FROM ({run_gpu}) WHERE jn % {parts} = {part}
        GROUP BY jn, wi HAVING gpus >= 2)
    WHERE m > 0 AND levels[-1] * (1 + 1e-9) >= (1 + {straggler_min_slowdown}) * m
      AND levels[-1] - m > {noise_z} * sqrt(2) * 1.4826 * arraySort(arrayMap(x -> abs(x - m), levels))[toUInt64(intDiv(gpus + 1, 2))]
),
per_window AS (
    SELECT r.jn AS jn, r.wi AS wi, any(h.bh) AS bh, any(h.sh) AS sh, count() AS gpus,
           arraySort(x -> (-x.3, x.1, x.2), groupArray((r.nn, r.gpu, r.b, r.n, toInt64(r.bsum)))) AS ranked,
           ranked[1] AS top, ranked[gpus + 1 - intDiv(gpus + 1, 2)] AS med, med.3 AS m,  -- nn: in node
           -- order; the lower median, read off the sorted means (what quantileExactLow(0.5) gives,
           -- without a second copy of them to sort)
           arraySort(arrayMap(x -> abs(x.3 - m), ranked))[toUInt64(intDiv(gpus + 1, 2))] AS mad,
           {noise_z} * sqrt(2) * 1.4826 * mad AS band,
           arrayFilter(x -> x.3 >= top.3 - band  -- or nearer the busiest than the median (exact: a mean
                            -- sum / n, cross-multiplied; one halfway is not nearer)
                            OR 2 * toInt128(x.5) * top.4 * med.4 > (toInt128(top.5) * med.4 + toInt128(med.5) * top.4) * x.4,
                       ranked) AS busy,
           toInt64(top.4) AS live_n, 5 * live_n * bh - top.5 AS short_n  -- the busiest GPU's, for 11's tolerance
    FROM ({run_gpu}) AS r INNER JOIN tmp_healthy AS h ON r.jn = h.jn
    WHERE h.job_id NOT IN (SELECT job_id FROM tmp_step_split) AND r.jn % {parts} = {part}
      AND (r.jn, r.wi) IN (SELECT jn, wi FROM spread)
    GROUP BY r.jn, r.wi
)
SELECT j.job_id AS job_id, wi, 'sm_activity' AS src, toInt64(-1) AS rank, k.node AS node,
       toInt32(if(length(busy) = 1, top.2, -1)) AS gpu, toFloat64(top.3 / m) AS ratio, toUInt64(0) AS steps,
       toFloat64(1 - m / top.3) AS f_wait
FROM per_window AS w INNER JOIN tmp_node_numbers AS k ON w.top.1 = k.nn
INNER JOIN tmp_job_numbers AS j ON w.jn = j.jn
WHERE gpus >= 2 AND med.5 > 0 AND med.5 * 200000 >= toInt64(med.4) * {dead_level} AND {at_healthy_level}
  AND toInt128(top.5) * med.4 * 1000000 >= toInt128({straggler_min_slowdown_ppm} + 1000000) * med.5 * top.4
  AND top.3 - m > band
  AND length(busy) * 2 < gpus AND length(arrayDistinct(arrayMap(x -> x.1, busy))) = 1
;;
-- Episodes: runs of consecutive windows with the same straggler (wi - its row number is constant along
-- a run), of {straggler_min_steps} steps (from SM activity: {straggler_min_windows} windows); persistent
-- where the run covers {straggler_persistent_fraction} of the job's windows with step events (from SM
-- activity: of its running windows). Each episode is numbered (`episode`): the windows of 11b carry the
-- number rather than the episode's key (source, rank, node, GPU, first window: 50 bytes a row of the
-- widest table, for the few rows in an episode), and stragglers.sql sums the gang's cost per number.
CREATE OR REPLACE TABLE tmp_straggler_episodes ENGINE = {temp_engine} AS
SELECT e.job_id AS job_id, e.src AS src, e.rank AS rank, e.node AS node, e.gpu AS gpu, e.wi_lo AS wi_lo,
       e.wi_hi AS wi_hi, e.steps AS steps, e.ratio AS ratio,
       if((e.wi_hi - e.wi_lo + 1) * 1000000 >= {straggler_persistent_fraction_ppm} * j.windows, 'persistent', 'transient') AS kind,
       toUInt32(row_number() OVER (ORDER BY e.job_id, e.src, e.rank, e.node, e.gpu, e.wi_lo)) AS episode  -- 11b, stragglers.sql
FROM (
    SELECT job_id, src, rank, node, gpu, min(wi) AS wi_lo, max(wi) AS wi_hi,
           sum(steps) AS steps, quantileExactLow(0.5)(ratio) AS ratio
    FROM (SELECT *, wi - row_number() OVER (PARTITION BY job_id, src, rank, node, gpu ORDER BY wi) AS run
          FROM tmp_straggler_windows)
    GROUP BY job_id, src, rank, node, gpu, run
    HAVING if(src = 'steps', steps >= {straggler_min_steps}, wi_hi - wi_lo + 1 >= {straggler_min_windows})
) AS e
INNER JOIN (SELECT job_id, 'steps' AS src, uniqExact(wi) AS windows FROM tmp_step_split GROUP BY job_id
            UNION ALL
            SELECT k.job_id, 'sm_activity', r.windows
            FROM (SELECT jn, uniqExact(wi) AS windows FROM tmp_run_hits WHERE n > 0 GROUP BY jn) AS r
            INNER JOIN tmp_job_numbers AS k ON r.jn = k.jn) AS j
    ON e.job_id = j.job_id AND e.src = j.src
;;
-- 11. Running time split: (1 - l) productive; l to data_stall / comm_stall by evidence, else idle (12).
--    The lost share l of each (job, GPU, window) of running time. Seconds below the dead level did no
--    work: each is lost whole (a GPU waiting on data or on a collective still shows a few % SM, which a
--    mean would credit as work). The dead level is {stalled_second_fraction} x b*, or {noise_z} sigma
--    where the job's noise is larger (one noisy second cannot tell less than that from nothing). The
--    other ("live") seconds lose 1 - b_live/b*, taken as 0 below the tolerance: {healthy_tolerance}, or
--    {noise_z} x the noise of the window's live mean (sigma / sqrt(live seconds)) over b* where that is
--    larger, so noise alone never makes a loss. The dead seconds are read off the window's levels (keys).
--    Both tests are exact, in integers (run.py's dead_level and at_healthy_level): at a tie (a second at
--    exactly 0.1 b*, a window at exactly the tolerance: common on the 0.01 % grid) the second is live and
--    the window loses, as the rule says, where floats fell either way.
--    Only what 11a and 11b read, a row per (job, GPU, window) with samples: `sampled` is 1, and 0 where
--    11b's join finds no row.
CREATE OR REPLACE TABLE tmp_loss ENGINE = {temp_engine} AS
SELECT slot, jn, nn, wi, toUInt8(1) AS sampled, l FROM (
    SELECT slot, jn, nn, wi, n, bh, sh,
           intDiv({dead_level} + 1999999, 2000000) AS dead_key,  -- the lowest live key
           arrayFilter(k -> k < dead_key, keys) AS dead,  -- one pass over the keys: most windows have none
           toInt64(length(dead)) AS n_dead,
           toInt64(n) - n_dead AS live_n,
           toInt64(bsum) - 10 * toInt64(arraySum(dead)) AS live_sum,
           5 * live_n * bh - live_sum AS short_n,
           if(live_n = 0 OR {at_healthy_level}, 0.0, least(1.0, short_n / (5 * live_n * bh))) AS l_live,
           (n_dead + live_n * l_live) / n AS l
    FROM ({run_gpu}) AS r INNER JOIN (SELECT jn, bh, sh FROM tmp_healthy) AS h ON r.jn = h.jn
)
;;
-- The slots with a running window that has no samples (11b): more windows in their running pieces than
-- rows in tmp_loss, which has one per sampled window. A slot's pieces never overlap (3, 5a), so two of them
-- share at most one window, the one's last and the next's first: the windows are the pieces' windows less
-- one for each such pair. 11b reads every window of these slots from tmp_loss, and of the others only the
-- windows that lost time (0.8 M of the bench day's 8.4 M); 1,088 of its 9,600 slots have a silent window.
CREATE OR REPLACE TABLE tmp_unsampled ENGINE = {temp_engine} AS
SELECT p.slot AS slot
FROM (SELECT slot, arraySort(groupArray((intDiv(assumeNotNull(o0), {W}), intDiv(assumeNotNull(o1) - 1, {W}))))
                 AS r,  -- each running piece's first and last window, in time order
             arraySum(x -> x.2 - x.1 + 1, r) - arrayCount(i -> i > 1 AND r[i].1 = r[i - 1].2, arrayEnumerate(r))
                 AS windows
      FROM tmp_pieces WHERE phase = 'run' GROUP BY slot) AS p
LEFT JOIN (SELECT slot, count() AS sampled FROM tmp_loss GROUP BY slot) AS s ON p.slot = s.slot
WHERE toInt64(s.sampled) < p.windows
;;
-- 11a. Each (job, node)'s evidence level while healthy: the (lower) median strength of each kind over the
--    windows in which none of the job's GPUs on the node lost anything, given at least
--    {evidence_baseline_windows} of them. A stall whose evidence is under the threshold but at least
--    {evidence_floor} of it and {evidence_rise} x that level has evidence all the same: the signal rose
--    with the stall (a fixed threshold cannot get both sides of its edge right). A live run takes the
--    levels the job's last whole run found on a node (2a), and finds the others over its own windows.
CREATE OR REPLACE TABLE tmp_carried_bases ENGINE = {temp_engine} AS
SELECT k.jn AS jn, n.nn AS nn, b.2 AS base_d, b.3 AS base_c
FROM tmp_carried AS c ARRAY JOIN c.baselines AS b
INNER JOIN tmp_job_numbers AS k ON c.job_id = k.job_id
INNER JOIN tmp_node_numbers AS n ON b.1 = n.node
;;
CREATE OR REPLACE TABLE tmp_evidence_base ENGINE = {temp_engine} AS
SELECT h.jn AS jn, h.nn AS nn,
       quantileExactLow(0.5)(ifNull(e.s_d, 0)) AS base_d, quantileExactLow(0.5)(ifNull(e.s_c, 0)) AS base_c,
       toUInt8(1) AS known
FROM (SELECT jn, nn, wi FROM tmp_loss GROUP BY jn, nn, wi HAVING max(l) = 0) AS h
LEFT JOIN tmp_node_evidence AS e ON h.nn = e.nn AND h.wi = e.wi
LEFT ANTI JOIN tmp_carried_bases AS c ON h.jn = c.jn AND h.nn = c.nn
GROUP BY h.jn, h.nn
HAVING count() >= {evidence_baseline_windows}
SETTINGS join_use_nulls = 1
;;
INSERT INTO tmp_evidence_base SELECT jn, nn, base_d, base_c, toUInt8(1) FROM tmp_carried_bases
;;
-- 11b. Each (job, GPU, window) of running time: its lost share l and how l splits (p_data + p_comm +
--    p_idle = 1). In a straggler episode from steps (10b) the other GPUs' comm wait is the straggler's extra
--    compute per step (the steps' own comm excess is measured against a usual the straggler skews) and its
--    own GPU has none. Step events win where the job's reporting ranks waited at least {step_wait_min} of
--    their step time beyond their usual (10a): l is at least that wait (a rank spinning in NCCL still shows
--    SM activity), and it splits as the steps waited. Elsewhere the counters decide: a kind is evidence at
--    or above its threshold (strength 1), or risen with the stall (11a); a straggler of the job (clock
--    events, 10; or an episode from SM activity, 10c) is comm evidence of strength 1, and in an SM episode
--    the other live GPUs lose at least its wait share (1 - median / busiest: a few % under the tolerance
--    still costs every GPU of the gang); both kinds split l by strength ({evidence_split} = 'strength') or
--    half each ('even'); neither, and l is idle. Step events are telemetry too: a GPU with no samples in a
--    window the job's steps cover (a trace of step times alone, an agent without NVML) is classified by
--    the steps, l = their wait; only with neither is it "no data" (12).
--    l is decided first, and the counters' evidence (9, 11a) joined only to the windows that lost time:
--    how a window with l = 0 would split is read by no one (12 and stragglers.sql multiply by l). Of
--    tmp_loss, only those windows are joined too, and every window of the slots tmp_unsampled names: a
--    window of another slot that tmp_loss lacks lost nothing, as all of that slot's windows have samples.
--    A join of the day's 8.4 M loss rows and one of its evidence per running window were 1.0-1.5 s of this
--    statement's 2.2-3.2 s on the bench day, and the loss rows' hash table the run's peak memory.
CREATE OR REPLACE TABLE tmp_run_split ENGINE = {temp_engine} AS  -- only what 12 and stragglers.sql read
WITH (SELECT (groupArray(k.nn), groupArray(k.node), groupArray(d.pool))  -- in the reasons (9)
      FROM tmp_node_numbers AS k LEFT JOIN dim_nodes AS d ON k.node = d.node) AS names
SELECT jn, nn, wi, secs, no_data, l, p_data, p_comm, p_idle,
       toLowCardinality(if(l = 0 OR p_data = 0, '',  -- the reasons of the seconds lost only: most are not
          if(by_steps, concat('step events of ', toString(ranks), ' ranks: data wait'),
             concat(if(NOT e_hit, '',
                       if(by_pool, concat('storage of pool ', transform(nn, names.1, names.3, ''), ' at ',
                                          toString(pool_pct), '% of its ceiling'),
                          concat('I/O pressure ', toString(psi_pct), '% on ', transform(nn, names.1, names.2, '')))),
                    if(s_d < 1000000, concat(' (', toString(round(s_d / 10000)),
                    '% of its threshold, risen with the stall)'), ''))))) AS d_why,
       toLowCardinality(multiIf(l = 0 OR p_comm = 0, '',
          blamed AND step_episode,
              concat('straggler ', sg_node, ' GPU ', toString(sg_gpu), ' (rank ', toString(sg_rank), ', ',
                     toString(round((sg_ratio - 1) * 100, 1)), '% slower)'),
          by_steps, concat('step events of ', toString(ranks), ' ranks: communication wait'),
          blamed, concat('straggler ', sg_node, if(sg_gpu >= 0, concat(' GPU ', toString(sg_gpu)), ''),
                         ' (', toString(round((sg_ratio - 1) * 100, 1)), '% busier than its gang)'),
          st_why != '', st_why,
          concat(if(NOT e_hit, '', concat(if(by_congestion, 'fabric congestion at ', 'NIC line rate at '),
                                           transform(nn, names.1, names.2, ''))),
                 if(s_c < 1000000, concat(' (', toString(round(s_c / 10000)),
                 '% of its threshold, risen with the stall)'), '')))) AS c_why,
       blamed, episode
FROM (  -- in layers, each reading the columns of the one below: as aliases of one SELECT, each use of a
        -- derived value repeated its whole expression in the query tree (5,800 nodes, 43 ms to analyse)
    SELECT *,
           multiIf(by_steps, f_data / f_step, d_ev AND c_ev,
                   if('{evidence_split}' = 'even', 0.5, s_d / (s_d + s_c)), d_ev, 1.0, 0.0) AS p_data,
           multiIf(by_steps, f_comm / f_step, c_ev, 1.0 - p_data, 0.0) AS p_comm,
           if(by_steps OR d_ev OR c_ev, 0.0, 1.0) AS p_idle
    FROM (
        SELECT *, greatest(e_s_c, if(st_why != '' OR blamed, 1000000, 0)) AS s_c,
               s_d >= 1000000 OR (s_d >= {evidence_floor_ppm} AND known = 1
                                  AND toInt128(s_d) * 1000000 >= toInt128({evidence_rise_ppm}) * base_d) AS d_ev,
               s_c >= 1000000 OR (s_c >= {evidence_floor_ppm} AND known = 1
                                  AND toInt128(s_c) * 1000000 >= toInt128({evidence_rise_ppm}) * base_c) AS c_ev
        FROM (  -- the windows with their l, then the counters' evidence of those that lost time
            SELECT r.jn AS jn, r.nn AS nn, r.wi AS wi, r.secs AS secs, r.no_data AS no_data, r.l AS l,
                   r.ranks AS ranks, r.by_steps AS by_steps, r.f_data AS f_data, r.f_comm AS f_comm,
                   r.f_step AS f_step, r.blamed AS blamed, r.episode AS episode, r.step_episode AS step_episode,
                   r.sg_node AS sg_node, r.sg_gpu AS sg_gpu, r.sg_rank AS sg_rank, r.sg_ratio AS sg_ratio,
                   r.st_why AS st_why, ifNull(e.s_d, 0) AS s_d, ifNull(e.s_c, 0) AS e_s_c, e.e_hit AS e_hit,
                   e.by_pool AS by_pool, e.pool_pct AS pool_pct, e.psi_pct AS psi_pct,
                   e.by_congestion AS by_congestion, b.known AS known, b.base_d AS base_d, b.base_c AS base_c
            FROM (
                SELECT *, f_data + f_comm AS f_step, f_step >= {step_wait_min} AS by_steps,
                       if(no_data, 1.0, multiIf(by_steps, greatest(gl, least(1.0, f_step)),
                                                blamed, greatest(gl, f_wait), gl)) AS l
                FROM (
                    SELECT w.jn AS jn, w.nn AS nn, w.wi AS wi, w.secs AS secs, g.l AS gl,
                           g.sampled = 0 AND w.slot IN (SELECT slot FROM tmp_unsampled) AND sp.ranks = 0
                               AS no_data,
                           sp.ranks AS ranks,
                           sg.hit = 1 AS in_episode, sg.src = 'steps' AS step_episode,
                           in_episode AND w.nn = sg.nn AND (w.gpu = sg.gpu OR (NOT step_episode AND sg.gpu = -1)) AS own,
                           in_episode AND NOT own AND (step_episode OR g.l < 1) AS blamed,
                           sg.episode AS episode, sg.f_wait AS f_wait, sg.node AS sg_node, sg.gpu AS sg_gpu,
                           sg.rank AS sg_rank, sg.ratio AS sg_ratio,
                           ifNull(sp.f_data, 0) AS f_data,
                           multiIf(step_episode AND own, 0.0, step_episode, sg.f_wait, ifNull(sp.f_comm, 0))
                               AS f_comm,
                           st.why AS st_why
                    FROM (SELECT k.gpu AS gpu, p.slot AS slot, p.jn AS jn, p.nn AS nn, p.wi AS wi, p.secs AS secs
                          FROM tmp_piece_windows AS p INNER JOIN tmp_slots AS k ON p.slot = k.slot
                          WHERE p.phase = 'run' AND p.nn % {parts} = {part}) AS w
                    LEFT JOIN (SELECT slot, wi, sampled, l FROM tmp_loss
                               WHERE nn % {parts} = {part} AND (l > 0 OR slot IN (SELECT slot FROM tmp_unsampled)))
                              AS g
                        ON w.slot = g.slot AND w.wi = g.wi
                    LEFT JOIN tmp_stragglers AS st ON w.jn = st.jn AND w.wi = st.wi
                    LEFT JOIN (SELECT k.jn AS jn, s.* FROM tmp_step_split AS s
                               INNER JOIN tmp_job_numbers AS k ON s.job_id = k.job_id) AS sp
                        ON w.jn = sp.jn AND w.wi = sp.wi
                    LEFT JOIN (SELECT j.jn AS jn, n.nn AS nn, sw.wi AS wi, sw.src AS src, sw.rank AS rank,
                                      sw.node AS node, sw.gpu AS gpu, e.episode AS episode, e.ratio AS ratio,
                                      sw.f_wait AS f_wait, toUInt8(1) AS hit
                               FROM tmp_straggler_windows AS sw INNER JOIN tmp_straggler_episodes AS e
                                   ON sw.job_id = e.job_id AND sw.src = e.src AND sw.rank = e.rank AND sw.node = e.node
                                      AND sw.gpu = e.gpu AND sw.wi BETWEEN e.wi_lo AND e.wi_hi
                               INNER JOIN tmp_job_numbers AS j ON sw.job_id = j.job_id
                               LEFT JOIN tmp_node_numbers AS n ON sw.node = n.node) AS sg
                        ON w.jn = sg.jn AND w.wi = sg.wi
                )
            ) AS r
            LEFT JOIN (SELECT nn, wi, s_d, s_c, by_pool, pool_pct, psi_pct, by_congestion, toUInt8(1) AS e_hit
                       FROM tmp_node_evidence WHERE nn % {parts} = {part}) AS e
                ON r.nn = e.nn AND r.wi = e.wi AND r.l > 0
            LEFT JOIN (SELECT * FROM tmp_evidence_base WHERE nn % {parts} = {part}) AS b
                ON r.jn = b.jn AND r.nn = b.nn AND r.l > 0
        )
    )
)
;;
-- 12. All categorised seconds per (job, node, window, category, evidence). A GPU with no samples at all
--     while running (its agent or node down) is classified as its gang in that window: the job's other
--     GPUs that did report, split the same way (a synchronous gang moves in lockstep: had the silent node
--     stalled, its peers would wait). With no peer reporting (a one-node job, a whole gang silent) it is
--     idle, "no telemetry from node". The silent windows meet their gang's split in one LEFT JOIN: `gang`
--     is computed at each use, and an INNER and an ANTI join read the running windows twice more (0.2 s
--     of 0.8 on the bench day, which has 552 silent windows).
CREATE OR REPLACE TABLE tmp_classified ENGINE = {temp_engine} AS
WITH
heard AS (
    SELECT jn, nn, wi, 'productive' AS category, '' AS evidence, secs * (1 - l) AS secs
    FROM tmp_run_split WHERE NOT no_data
    UNION ALL
    SELECT jn, nn, wi, 'data_stall', d_why, secs * l * p_data
    FROM tmp_run_split WHERE l > 0 AND p_data > 0 AND NOT no_data
    UNION ALL
    SELECT jn, nn, wi, 'comm_stall', c_why, secs * l * p_comm
    FROM tmp_run_split WHERE l > 0 AND p_comm > 0 AND NOT no_data
    UNION ALL
    SELECT jn, nn, wi, 'idle', 'below healthy level, no evidence', secs * l * p_idle
    FROM tmp_run_split WHERE l > 0 AND p_idle > 0 AND NOT no_data
),
silent AS (SELECT jn, nn, wi, sum(secs) AS secs FROM tmp_run_split WHERE no_data GROUP BY jn, nn, wi),
gang AS (  -- only the windows a silent GPU is in: the joins below read no other
    SELECT jn, wi, category, evidence, sum(secs) / sum(sum(secs)) OVER (PARTITION BY jn, wi) AS share
    FROM heard WHERE (jn, wi) IN (SELECT jn, wi FROM silent) GROUP BY jn, wi, category, evidence
)
SELECT jn, nn, wi, toLowCardinality(category) AS category, toLowCardinality(evidence) AS evidence, secs FROM (
SELECT jn, nn, wi, phase AS category, evidence, secs FROM tmp_piece_windows WHERE phase != 'run'
UNION ALL
SELECT jn, nn, wi, category, evidence, secs FROM heard
UNION ALL
SELECT s.jn, s.nn, s.wi, if(g.hit, g.category, 'idle'),
       if(g.hit, concat('no telemetry from node; as its gang', if(g.evidence != '', concat(': ', g.evidence), '')),
          'no telemetry from node'),
       if(g.hit, s.secs * g.share, s.secs)
FROM silent AS s LEFT JOIN (SELECT *, toUInt8(1) AS hit FROM gang) AS g ON s.jn = g.jn AND s.wi = g.wi
)
;;
-- A whole run replaces its jobs' windows in goodput_windows; a live run ({windows_table} = goodput_live)
-- its jobs' windows from {live_from} on.
DELETE FROM {delete_windows}
WHERE cluster = '{cluster}' AND window_start >= toDateTime(intDiv({live_from}, 1000)) AND job_id IN ({alive_jobs})
;;
-- 13. One row per (job, window, category): seconds and cost summed as integers (micro-seconds, nano-units
--     of currency); pool and evidence are those holding the most seconds, ties to the smallest name. The
--     GPUs' rows are summed per (pool, evidence) before the maps pick those, and the job's names are
--     looked up after (on the bench day 9.4 M rows -> 0.15 M: the statement 1.8 -> 1.0 s).
INSERT INTO {windows_table} (cluster, job_id, window_start, window_s, team, pool, account, category,
                               gpu_seconds, cost, evidence)
SELECT '{cluster}', any(jobs.job_id), toDateTime(intDiv(w.wi * {W}, 1000)), {W} / 1000, jobs.team,
       (sumMap([w.pool], [w.secs_us]) AS pm).1[indexOf(pm.2, arrayMax(pm.2))], jobs.account, w.category,
       sum(w.secs_us) / 1e6, sum(w.cost_nano) / 1e9,
       (sumMap([w.evidence], [w.secs_us]) AS em).1[indexOf(em.2, arrayMax(em.2))]
FROM (  -- per pool and evidence first: the maps then take a few rows per window, not every GPU's
    SELECT jn, wi, category, pool, evidence, sum(us) AS secs_us, sum(nano) AS cost_nano
    FROM (
        SELECT c.jn AS jn, c.wi AS wi, c.category AS category, nodes.pool AS pool, c.evidence AS evidence,
               toInt64(round(c.secs * 1e6)) AS us, toInt64(round(c.secs * nodes.price / 3600 * 1e9)) AS nano
        FROM tmp_classified AS c
        INNER JOIN (  -- each node's pool and price, looked up once
            SELECT k.nn AS nn, ifNull(d.pool, '') AS pool, ifNull(d.price_per_gpu_hour, 0) AS price
            FROM tmp_node_numbers AS k LEFT JOIN dim_nodes AS d ON k.node = d.node
            SETTINGS join_use_nulls = 1
        ) AS nodes ON c.nn = nodes.nn
    )
    WHERE us > 0
    GROUP BY jn, wi, category, pool, evidence
) AS w
INNER JOIN (  -- each job's name, account and team, looked up once
    SELECT k.jn AS jn, k.job_id AS job_id, ifNull(j.account, '') AS account,
           ifNull(a.team, '{default_team}') AS team
    FROM tmp_job_numbers AS k
    LEFT JOIN (SELECT job_id, argMinIf(account, (t, o), account != '') AS account FROM tmp_events
               GROUP BY job_id) AS j ON k.job_id = j.job_id
    LEFT JOIN dim_accounts AS a ON j.account = a.account
    SETTINGS join_use_nulls = 1
) AS jobs ON w.jn = jobs.jn
GROUP BY w.jn, w.wi, w.category, jobs.team, jobs.account
