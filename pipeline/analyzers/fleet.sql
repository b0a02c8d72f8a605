-- Fleet views: queue delay, capacity, fragmentation, who holds which pool, idle allocations, placement
-- (docs/goodput-model.md, "Scheduling and capacity" and "Topology"). Runs after rollups.sql, reading its
-- tables, goodput.sql's tmp_ tables of the run and the dim_ tables; same conventions as goodput.sql: times
-- in epoch ms, sums over integers (micro-seconds, milli-seconds), exact quantiles (nearest rank), ties to the
-- smallest name, and each statement replaces exactly what the run covers, so re-analysis is idempotent:
--   per job ({alive_jobs}): pool_holds, idle_allocations, job_placement;
--   per day [{sub_lo}, {sub_hi}] (the alive jobs' submissions, now and before): queue_delay_day;
--   per day [{day_lo}, {day_hi}] (as team_day): pool_team_day;
--   per bucket [{cap_lo}, {cap_hi}) (the run's days' windows, up to the end of the data): pool_capacity;
--   per window [{start}, {frag_hi}) (the range itself, up to the end of the data): pool_fragmentation.

-- 1. Queue delay per day of submission, for all jobs and per pool, team and priority: the nearest-rank
--    percentiles (the ceil(q n)-th smallest queue_wait_s) of the jobs that got a first GPU.
DELETE FROM {delete_from[queue_delay_day]} WHERE cluster = '{cluster}'
    AND day >= toDate(toDateTime(intDiv(toInt64({sub_lo}), 1000), 'UTC')) AND day <= toDate(toDateTime(intDiv(toInt64({sub_hi}), 1000), 'UTC'))
;;
INSERT INTO queue_delay_day (cluster, day, by, key, jobs, waiting, p50_s, p90_s, p99_s, max_s)
SELECT '{cluster}', day, g.1, g.2, length(ws), n - length(ws),
       if(notEmpty(ws), ws[toUInt64(ceil(round(0.50 * length(ws), 6)))] / 1000, NULL),
       if(notEmpty(ws), ws[toUInt64(ceil(round(0.90 * length(ws), 6)))] / 1000, NULL),
       if(notEmpty(ws), ws[toUInt64(ceil(round(0.99 * length(ws), 6)))] / 1000, NULL),
       if(notEmpty(ws), ws[-1] / 1000, NULL)
FROM (
    SELECT day, g, arraySort(groupArrayIf(w, w >= 0)) AS ws, count() AS n
    FROM (
        SELECT toDate(submitted) AS day, if(queue_wait_s IS NULL, toInt64(-1), toInt64(round(queue_wait_s * 1000))) AS w,
               arrayJoin([('all', ''), ('pool', toString(pool)), ('team', toString(team)),
                          ('priority', toString(priority))]) AS g
        FROM scheduling_delay
        WHERE cluster = '{cluster}'
          AND day >= toDate(toDateTime(intDiv(toInt64({sub_lo}), 1000), 'UTC')) AND day <= toDate(toDateTime(intDiv(toInt64({sub_hi}), 1000), 'UTC'))
    )
    GROUP BY day, g
)
;;
-- 2. Capacity per pool and bucket of {bucket} ms: the pool's GPUs x the bucket's seconds up to the end of the
--    data ({as_of}), the GPU-seconds goodput_windows puts on the pool (every category), and the rest,
--    unallocated, so capacity = allocated + unallocated exactly (in micro-seconds).
DELETE FROM {delete_from[pool_capacity]} WHERE cluster = '{cluster}'
    AND bucket_start >= toDateTime(intDiv(toInt64({cap_lo}), 1000)) AND bucket_start < toDateTime(intDiv(toInt64({cap_hi}), 1000))
;;
INSERT INTO pool_capacity (cluster, bucket_start, bucket_s, pool, pool_class, gpus, capacity_gpu_s,
                           allocated_gpu_s, unallocated_gpu_s, allocated_pct)
WITH
buckets AS (SELECT arrayJoin(range(toInt64({cap_lo}), toInt64({cap_hi}), toInt64({bucket}))) AS b),
alloc AS (
    SELECT pool, intDiv(toInt64(toUnixTimestamp(window_start)) * 1000, {bucket}) * {bucket} AS b,
           sum(toInt64(round(gpu_seconds * 1e6))) AS us
    FROM goodput_windows
    WHERE cluster = '{cluster}' AND window_start >= toDateTime(intDiv(toInt64({cap_lo}), 1000))
      AND window_start < toDateTime(intDiv(toInt64({cap_hi}), 1000))
    GROUP BY pool, b
)
SELECT '{cluster}', toDateTime(intDiv(b, 1000)), intDiv({bucket}, 1000), pool, pool_class, gpus,
       cap_us / 1e6, al_us / 1e6, (cap_us - al_us) / 1e6, 100 * al_us / greatest(cap_us, 1)
FROM (
    SELECT k.b AS b, p.pool AS pool, p.pool_class AS pool_class, p.gpus AS gpus,
           toInt64(p.gpus) * (least(k.b + {bucket}, toInt64({as_of})) - k.b) * 1000 AS cap_us, a.us AS al_us
    FROM buckets AS k CROSS JOIN dim_pools AS p
    LEFT JOIN alloc AS a ON a.pool = p.pool AND a.b = k.b
)
;;
-- 3. Fragmentation, sampled at each window start t of the range: per pool, the free GPUs (allocated to no
--    job at t, tmp_alloc) against the jobs pending for it at t (submitted <= t < first allocation, or
--    cancellation; headed for the pool of their first allocated node, else their queue). The smallest
--    pending request g fits when a node has g GPUs free (g <= GPUs per node) or ceil(g / GPUs per node)
--    nodes are wholly free (a gang larger than a node takes whole nodes). When it does not fit, no pending
--    gang fits (a larger one needs more), so all free GPUs are stranded; fragmented when free >= g.
--    Only instants with a job pending for the pool are written.
DELETE FROM {delete_from[pool_fragmentation]} WHERE cluster = '{cluster}'
    AND window_start >= toDateTime(intDiv(toInt64({start}), 1000)) AND window_start < toDateTime(intDiv(toInt64({frag_hi}), 1000))
;;
INSERT INTO pool_fragmentation (cluster, window_start, window_s, pool, free_gpus, free_nodes, max_free_on_node,
                                pending_jobs, smallest_pending_gpus, stranded_gpus, fragmented)
WITH
jobs AS (
    SELECT job_id, minIf(t, event = 'submitted') AS sub, minIf(t, event = 'allocated') AS alloc,
           minIf(t, event IN ('cancelled', 'completed', 'failed', 'preempted')) AS gone,
           if(alloc > 0, alloc, if(gone > 0, gone, toInt64({as_of}))) AS stop, max(gpus_requested) AS req,
           argMinIf(node, (t, o), event = 'allocated') AS a_node, argMinIf(queue, (t, o), queue != '') AS queue
    FROM tmp_events GROUP BY job_id HAVING countIf(event = 'submitted') > 0 AND req > 0
),
pending AS (
    SELECT if(ifNull(d.pool, '') != '', d.pool, j.queue) AS pool, j.req AS req,
           arrayJoin(range(intDiv(greatest(j.sub, toInt64({start})) + {W} - 1, {W}),
                           greatest(intDiv(greatest(j.sub, toInt64({start})) + {W} - 1, {W}),
                                    intDiv(least(j.stop, toInt64({frag_hi})) + {W} - 1, {W})))) AS wi
    FROM jobs AS j LEFT JOIN dim_nodes AS d ON j.a_node = d.node
),
pw AS (
    SELECT pool, wi, count() AS n, min(req) AS smallest FROM pending
    WHERE pool IN (SELECT pool FROM dim_pools) GROUP BY pool, wi
),
merged_holds AS (  -- each GPU's allocations, merged where they overlap (a GPU counts once however often it is held)
    SELECT node, gpu, min(a0) AS h0, max(a1) AS h1
    FROM (
        SELECT node, gpu, a0, a1, sum(reach IS NULL OR a0 > reach)
                                   OVER (PARTITION BY node, gpu ORDER BY a0, a1 ROWS UNBOUNDED PRECEDING) AS seg
        FROM (SELECT node, gpu, a0, a1,
                     max(a1) OVER (PARTITION BY node, gpu ORDER BY a0, a1 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
              FROM tmp_alloc WHERE a1 > a0)
    )
    GROUP BY node, gpu, seg
),
in_use AS (  -- GPUs held on a node from each instant its count changes on
    SELECT node, t, sum(change) OVER (PARTITION BY node ORDER BY t ROWS UNBOUNDED PRECEDING) AS used
    FROM (SELECT node, t, sum(d) AS change
          FROM (SELECT node, h0 AS t, 1 AS d FROM merged_holds UNION ALL SELECT node, h1, -1 FROM merged_holds)
          GROUP BY node, t)
),
occ AS (  -- per (node of the pool, pending window): the count at the window's start (the last change at or before it)
    SELECT q.node AS node, q.wi AS wi, u.used AS used
    FROM (SELECT d.node AS node, p.wi AS wi, p.wi * {W} AS t FROM pw AS p INNER JOIN dim_nodes AS d ON d.pool = p.pool) AS q
    ASOF INNER JOIN in_use AS u ON q.node = u.node AND q.t >= u.t
),
free AS (
    SELECT pool, wi, any(n) AS n, any(smallest) AS smallest, toInt64(any(gpus_per_node)) AS gpn,
           sum(f) AS free_gpus, countIf(f = gpus_per_node) AS free_nodes, max(f) AS max_free
    FROM (SELECT p.pool AS pool, p.wi AS wi, p.n AS n, p.smallest AS smallest, d.gpus_per_node AS gpus_per_node,
                 greatest(toInt64(0), toInt64(d.gpus_per_node) - toInt64(o.used)) AS f
          FROM pw AS p INNER JOIN dim_nodes AS d ON d.pool = p.pool
          LEFT JOIN occ AS o ON o.node = d.node AND o.wi = p.wi) AS p
    GROUP BY pool, wi
)
SELECT '{cluster}', toDateTime(intDiv(wi * {W}, 1000)), intDiv({W}, 1000), pool, free_gpus, free_nodes, max_free,
       n, smallest,
       if(if(smallest <= gpn, max_free >= smallest, free_nodes >= intDiv(smallest + gpn - 1, gpn)),
          0, free_gpus) AS stranded,
       stranded > 0 AND free_gpus >= smallest
FROM free
;;
-- 4. Which jobs hold which pool and for how long: per job and pool, from its first GPU allocated there to
--    its last released (all attempts), the distinct GPUs and the allocated GPU-time (integer ms).
DELETE FROM {delete_from[pool_holds]} WHERE cluster = '{cluster}' AND job_id IN ({alive_jobs})
;;
INSERT INTO pool_holds (cluster, job_id, team, pool, pool_class, held_from, held_to, hold_s, gpus, gpu_hours)
SELECT '{cluster}', a.job_id, ifNull(any(t.team), '{default_team}'), d.pool, any(d.pool_class),
       fromUnixTimestamp64Milli(min(a.a0)), fromUnixTimestamp64Milli(max(a.a1)), (max(a.a1) - min(a.a0)) / 1000,
       uniqExact(a.node, a.gpu), sum(a.a1 - a.a0) / 3600000
FROM (SELECT * FROM tmp_alloc WHERE a1 > a0) AS a
INNER JOIN dim_nodes AS d ON a.node = d.node
LEFT JOIN (SELECT job_id, argMinIf(account, (t, o), account != '') AS account FROM tmp_events GROUP BY job_id) AS j
    ON a.job_id = j.job_id
LEFT JOIN dim_accounts AS t ON j.account = t.account
GROUP BY a.job_id, d.pool
SETTINGS join_use_nulls = 1
;;
-- 5. Per day, pool and team: allocated GPU-hours and goodput (goodput_windows), the jobs holding GPUs of the
--    pool that day and the longest of their holds (ties to the smallest job id).
DELETE FROM {delete_from[pool_team_day]} WHERE cluster = '{cluster}'
    AND day >= toDate(toDateTime(intDiv(toInt64({day_lo}), 1000), 'UTC')) AND day <= toDate(toDateTime(intDiv(toInt64({day_hi}), 1000), 'UTC'))
;;
INSERT INTO pool_team_day (cluster, day, pool, pool_class, team, gpu_hours, goodput_pct, jobs, longest_hold_s,
                           longest_hold_job)
WITH
usage AS (
    SELECT toDate(window_start) AS day, pool, team, sum(x) AS us, sumIf(x, category = 'productive') AS prod
    FROM (SELECT window_start, pool, team, category, toInt64(round(gpu_seconds * 1e6)) AS x FROM goodput_windows
          WHERE cluster = '{cluster}'
            AND toDate(window_start) >= toDate(toDateTime(intDiv(toInt64({day_lo}), 1000), 'UTC'))
            AND toDate(window_start) <= toDate(toDateTime(intDiv(toInt64({day_hi}), 1000), 'UTC')))
    GROUP BY day, pool, team
),
holds AS (
    SELECT day, pool, team, count() AS jobs, max(hold_ms) AS longest, argMin(job_id, (-hold_ms, job_id)) AS longest_job
    FROM (SELECT job_id, pool, team, toInt64(round(hold_s * 1000)) AS hold_ms,
                 arrayJoin(arrayMap(x -> toDate(x), range(toUInt32(toDate(held_from)),
                                                          toUInt32(toDate(held_to - toIntervalMillisecond(1))) + 1))) AS day
          FROM pool_holds WHERE cluster = '{cluster}' AND held_to > held_from)
    WHERE day >= toDate(toDateTime(intDiv(toInt64({day_lo}), 1000), 'UTC')) AND day <= toDate(toDateTime(intDiv(toInt64({day_hi}), 1000), 'UTC'))
    GROUP BY day, pool, team
)
SELECT '{cluster}', k.day, k.pool, ifNull(p.pool_class, ''), k.team, ifNull(u.us, 0) / 1e6 / 3600,
       100 * ifNull(u.prod, 0) / greatest(ifNull(u.us, 0), 1), ifNull(h.jobs, 0), ifNull(h.longest, 0) / 1000,
       ifNull(h.longest_job, '')
FROM (SELECT day, pool, team FROM usage UNION DISTINCT SELECT day, pool, team FROM holds) AS k
LEFT JOIN usage AS u ON k.day = u.day AND k.pool = u.pool AND k.team = u.team
LEFT JOIN holds AS h ON k.day = h.day AND k.pool = h.pool AND k.team = h.team
LEFT JOIN dim_pools AS p ON k.pool = p.pool
SETTINGS join_use_nulls = 1
;;
-- 6. Idle allocations: per allocated GPU, the stretches of its one-second samples (filed as in goodput.sql
--    step 7, any phase) at or below {idle_busy_milli} milli-% SM activity, with no sample above it in
--    between (missing samples do not break a stretch); a stretch of at least {idle_after_ms} ms is a reclaim
--    candidate. It runs from the start of its first second to the end of its last, within the allocation.
--    Read from goodput.sql's {gpu_windows} (rollup rows, or the raw rows' same sums: step 3e) without
--    putting the samples in time order: a candidate outlasts a window (the config refuses an
--    idle_reclaim_after_s under window_s + 1 s), so it lies between two windows of its allocation that
--    hold an active sample and are consecutive among such windows (or the allocation's edges), in a gap
--    long enough to hold it; its ends are the first and last idle samples between the last active sample
--    of the one and the first of the other. The gaps are found in two passes. The first reads no samples:
--    a window wholly inside the allocation whose busy sum is above the level on average holds an active
--    sample for sure, and a gap long enough between such windows (tmp_idle_cands) is where a real one can
--    be, since the windows it lacks can only split it. The second reads the samples of those candidates'
--    windows alone and splits them at every window with an active sample (tmp_idle_gaps). Last, the
--    samples are read again only in the gaps' windows. The active windows are gathered with their
--    repeats (a window in two rollup rows), sorted: a set would cost a hash per window (0.9 -> 0.75 s on
--    the bench day), and a window next to itself is no gap. An allocation is gathered by a number of its
--    own (`aid`, its rank among the run's allocations) and named again after: a group of every active
--    window by (job, node) names cost 0.25 s of 1.0 on the bench day. The windows meet their allocations on
--    one integer, the GPU's node number (goodput.sql 5) and index packed (the index is 0-63,
--    docs/messages.md): the node's name and the index as two keys of the ASOF join took 0.63-0.66 s of the
--    bench day against 0.49-0.51 s.
CREATE OR REPLACE TABLE tmp_idle_cands ENGINE = {temp_engine} AS
WITH
(SELECT (groupArray(node), groupArray(nn)) FROM tmp_node_numbers) AS numbers,
held AS (SELECT dense_rank() OVER (ORDER BY job_id, node, gpu, a0, a1) AS aid, job_id, node, gpu, a0, a1,
                bitOr(bitShiftLeft(toUInt64(transform(node, numbers.1, numbers.2, toUInt32(0))), 6),
                      toUInt64(gpu)) AS k
         FROM (SELECT DISTINCT job_id, node, gpu, a0, a1 FROM tmp_alloc WHERE a1 > a0)),
rolled AS (  -- keyed as `held`; a node outside the run (number 0) has no allocation to meet
    SELECT *, bitOr(bitShiftLeft(toUInt64(transform(node, numbers.1, numbers.2, toUInt32(0))), 6),
                    toUInt64(gpu)) AS k
    FROM ({gpu_windows}) WHERE k >= 64
),
sure AS (  -- per allocation, its windows active for sure; -1 stands for none, so every allocation is here
    SELECT p.aid AS aid, r.wi AS wi
    FROM rolled AS r ASOF INNER JOIN held AS p ON r.k = p.k AND r.wi * {W} >= p.a0
    WHERE r.ws + {W} <= p.a1 AND r.bsum > {idle_busy_milli} * r.n
    UNION ALL
    SELECT aid, -1 FROM held
)
SELECT h.job_id AS job_id, h.node AS node, h.gpu AS gpu, h.a0 AS a0, h.a1 AS a1, g.1 AS c1, g.2 AS c2
FROM (SELECT aid, arraySort(groupArrayIf(wi, wi >= 0)) AS aw FROM sure GROUP BY aid) AS s
INNER JOIN held AS h ON s.aid = h.aid
ARRAY JOIN arrayZip(arrayPushFront(aw, intDiv(a0, {W}) - 1), arrayPushBack(aw, intDiv(a1 - 1, {W}) + 1)) AS g
WHERE (g.2 - g.1 + 1) * {W} + 1000 >= {idle_after_ms} AND g.2 > g.1  -- a window listed twice is no gap
;;
-- consecutive windows with an active sample, the allocation's edges standing in at either end
CREATE OR REPLACE TABLE tmp_idle_gaps ENGINE = {temp_engine} AS
WITH
active AS (  -- the windows inside each candidate that hold an active sample of its allocation
    SELECT c.job_id AS job_id, c.node AS node, c.gpu AS gpu, c.a0 AS a0, c.a1 AS a1, c.c1 AS c1, c.c2 AS c2,
           r.wi AS wi
    FROM (SELECT * FROM ({gpu_windows}) WHERE node IN (SELECT node FROM tmp_idle_cands)) AS r
    INNER JOIN tmp_idle_cands AS c ON r.node = c.node AND r.gpu = c.gpu
    WHERE r.wi > c.c1 AND r.wi < c.c2
      AND arrayExists(x -> r.ws + x.1 >= c.a0 AND r.ws + x.1 < c.a1 AND x.2 > {idle_busy_milli}, r.samples)
)
SELECT job_id, node, gpu, a0, a1, g.1 AS w1, g.2 AS w2
FROM (
    SELECT c.job_id AS job_id, c.node AS node, c.gpu AS gpu, c.a0 AS a0, c.a1 AS a1, c.c1 AS c1, c.c2 AS c2,
           arraySort(groupUniqArrayIf(assumeNotNull(a.wi), a.wi IS NOT NULL)) AS aw
    FROM tmp_idle_cands AS c
    LEFT JOIN active AS a ON c.job_id = a.job_id AND c.node = a.node AND c.gpu = a.gpu AND c.a0 = a.a0 AND c.c1 = a.c1
    GROUP BY job_id, node, gpu, a0, a1, c1, c2
)
ARRAY JOIN arrayZip(arrayPushFront(aw, c1), arrayPushBack(aw, c2)) AS g
WHERE (g.2 - g.1 + 1) * {W} + 1000 >= {idle_after_ms}
SETTINGS join_use_nulls = 1
;;
DELETE FROM {delete_from[idle_allocations]} WHERE cluster = '{cluster}' AND job_id IN ({alive_jobs})
;;
INSERT INTO idle_allocations (cluster, job_id, team, pool, node, gpu, idle_from, idle_to, idle_s, reclaimable_s,
                              gpu_hours)
WITH
rolled AS ({gpu_windows}),
in_gap AS (  -- the samples of each gap's windows in its allocation, its bounding windows included
    SELECT * FROM (
        SELECT g.job_id AS job_id, g.node AS node, g.gpu AS gpu, g.a0 AS a0, g.a1 AS a1, g.w1 AS w1, g.w2 AS w2,
               r.wi AS wi, arrayFilter(x -> x.1 >= g.a0 AND x.1 < g.a1,
                                       arrayMap(x -> (r.ws + x.1, x.2 > {idle_busy_milli}), r.samples)) AS m
        FROM rolled AS r INNER JOIN tmp_idle_gaps AS g ON r.node = g.node AND r.gpu = g.gpu
        WHERE r.wi >= g.w1 AND r.wi <= g.w2
    )
    WHERE notEmpty(m)
),
s AS (  -- per gap: the samples of its two bounding windows, the range of the idle ones in between
    SELECT job_id, node, gpu, a0, a1,
           groupArrayArrayIf(m, wi = w1) AS first_w, groupArrayArrayIf(m, wi = w2) AS last_w,
           minIf(arrayMin(x -> x.1, m), wi > w1 AND wi < w2) AS mid_lo,
           maxIf(arrayMax(x -> x.1, m), wi > w1 AND wi < w2) AS mid_hi,
           countIf(wi > w1 AND wi < w2) AS mids,
           arrayMax(arrayMap(x -> x.1, arrayFilter(x -> x.2, first_w))) AS la,
           arrayMin(arrayMap(x -> x.1, arrayFilter(x -> x.2, last_w))) AS fa,
           arrayFilter(t -> t > la, arrayMap(x -> x.1, arrayFilter(x -> NOT x.2, first_w))) AS after_la,
           arrayFilter(t -> t < fa, arrayMap(x -> x.1, arrayFilter(x -> NOT x.2, last_w))) AS before_fa,
           arrayConcat(after_la, before_fa, if(mids > 0, [mid_lo, mid_hi], [])) AS idle_ends,
           arrayMin(idle_ends) AS t0, arrayMax(idle_ends) AS t1
    FROM in_gap
    GROUP BY job_id, node, gpu, a0, a1, w1, w2
),
ep AS (
    SELECT job_id, node, gpu, greatest(t0 - 999, a0) AS f, least(t1 + 1, a1) AS l
    FROM s WHERE notEmpty(idle_ends) AND l - f >= {idle_after_ms}
)
SELECT '{cluster}', e.job_id, ifNull(any(t.team), '{default_team}'), ifNull(any(d.pool), ''), e.node, toInt32(e.gpu),
       fromUnixTimestamp64Milli(e.f), fromUnixTimestamp64Milli(e.l), (e.l - e.f) / 1000,
       (e.l - e.f - {idle_after_ms}) / 1000, (e.l - e.f) / 3600000
FROM ep AS e
LEFT JOIN dim_nodes AS d ON e.node = d.node
LEFT JOIN (SELECT job_id, argMinIf(account, (t, o), account != '') AS account FROM tmp_events GROUP BY job_id) AS j
    ON e.job_id = j.job_id
LEFT JOIN dim_accounts AS t ON j.account = t.account
GROUP BY e.job_id, e.node, e.gpu, e.f, e.l
SETTINGS join_use_nulls = 1
;;
-- 7. Placement per job: the nodes it held (all attempts), the leaf switches and racks they hang off
--    (dim_topology), whether its gang crosses a switch above the leaves, and the lowest switch above all of
--    them, beside its comm stall (goodput_windows).
DELETE FROM {delete_from[job_placement]} WHERE cluster = '{cluster}' AND job_id IN ({alive_jobs})
;;
INSERT INTO job_placement (cluster, job_id, team, pool, nodes, leaves, racks, crosses_spine, top_switch,
                           unmapped_nodes, allocated_gpu_s, comm_stall_gpu_s, comm_stall_pct)
WITH
pl AS (
    SELECT n.job_id AS job_id, count() AS nodes, uniqExactIf(t.leaf, t.leaf != '') AS leaves,
           uniqExactIf(t.rack, t.rack != '') AS racks, countIf(ifNull(t.leaf, '') = '') AS unmapped,
           arraySort(groupArrayIf(t.path, t.leaf != '')) AS paths,
           if(unmapped = 0 AND notEmpty(paths), arrayFirst(x -> arrayAll(p -> has(p, x), paths), paths[1]), '') AS top
    FROM (SELECT DISTINCT job_id, node FROM tmp_alloc WHERE a1 > a0) AS n
    LEFT JOIN dim_topology AS t ON n.node = t.node
    GROUP BY n.job_id
),
use AS (
    SELECT job_id, sum(x) AS us, sumIf(x, category = 'comm_stall') AS comm
    FROM (SELECT job_id, category, toInt64(round(gpu_seconds * 1e6)) AS x FROM goodput_windows
          WHERE cluster = '{cluster}' AND job_id IN (SELECT job_id FROM tmp_events))
    GROUP BY job_id
)
SELECT '{cluster}', pl.job_id, ifNull(js.team, '{default_team}'), ifNull(js.pool, ''), pl.nodes, pl.leaves,
       pl.racks, pl.leaves > 1, pl.top, pl.unmapped, ifNull(u.us, 0) / 1e6, ifNull(u.comm, 0) / 1e6,
       100 * ifNull(u.comm, 0) / greatest(ifNull(u.us, 0), 1)
FROM pl
LEFT JOIN use AS u ON pl.job_id = u.job_id
LEFT JOIN (SELECT job_id, team, pool FROM job_summary WHERE cluster = '{cluster}'
           AND job_id IN (SELECT job_id FROM tmp_events)) AS js ON pl.job_id = js.job_id
SETTINGS join_use_nulls = 1
