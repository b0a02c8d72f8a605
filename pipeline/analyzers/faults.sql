-- Faults: one row per failed or preempted attempt, with its kind, where it happened and the GPU time it
-- cost; then the repeat offenders (docs/summary.md). Same conventions as goodput.sql: run after it and
-- rollups.sql, in the same run, reading its temp tables; the run's jobs are replaced whole.
-- Kind comes from the event's reason (catalog.FAULT_KINDS; XID classes catalog.XID_CLASSES). A
-- preemption is the scheduler's decision: owner 'scheduler'; everything else owner 'job'.
-- Where: the event's own node; else telemetry of the job's GPUs and ports within {fault_evidence_ms} ms
-- of it (node clock corrected): a GPU reporting an XID (the reason's code first), a lost GPU, a port not
-- ACTIVE; else, for node_lost, the one node the job released first near it while holding others.
-- Cost: the retry_waste pieces goodput.sql cut for the failure ("lost progress: <reason>" up to it, the
-- restart after it) and the idle pieces "held after <event>: <reason>", found by time: a lost-progress
-- piece belongs to the job's first fault at or after its end, the others to the last fault at or before
-- their start. Seconds are summed as integer milliseconds, cost as nano-units of currency.
DELETE FROM {delete_from[faults]} WHERE cluster = '{cluster}' AND job_id IN ({alive_jobs})
;;
INSERT INTO faults (cluster, job_id, attempt, ts, event, kind, owner, reason, xid, exit_code, node, gpu, nic,
                    located_by, lost_gpu_seconds, restart_gpu_seconds, held_gpu_seconds, gpu_seconds, cost)
WITH
f AS (
    SELECT job_id, toUnixTimestamp64Milli(ts) AS t, event, attempt, ifNull(reason, '') AS reason, exit_code,
           ifNull(node, '') AS ev_node,
           row_number() OVER (PARTITION BY job_id, t ORDER BY sender, seq, batch_row) AS nth,
           if(startsWith(reason, 'xid:'), toUInt32OrNull(substring(reason, 5)), NULL) AS xid,
           multiIf(event = 'preempted' OR reason = 'preempted', 'preemption',
                   startsWith(reason, 'xid:'),
                   multiIf(has([{xid_hw}], ifNull(xid, 0)), 'xid_hw', has([{xid_app}], ifNull(xid, 0)), 'xid_app',
                           'xid_other'),
                   reason IN ('nccl_timeout', 'oom', 'node_lost', 'timeout', 'user'), reason,
                   startsWith(reason, 'exit_code:') OR startsWith(reason, 'signal:')
                       OR (reason = '' AND exit_code IS NOT NULL), 'exit_code',
                   'other') AS kind
    FROM raw_job FINAL
    WHERE cluster = '{cluster}' AND event IN ('failed', 'preempted') AND job_id IN (SELECT job_id FROM tmp_events)
),
held_at AS (  -- the job's GPUs held at each fault
    SELECT f.job_id AS job_id, f.t AS t, a.node AS node, a.gpu AS gpu
    FROM f INNER JOIN tmp_alloc AS a ON f.job_id = a.job_id
    WHERE a.a0 <= f.t AND f.t <= a.a1
),
gpu_ev AS (  -- XIDs and lost GPUs on them, nearest first
    SELECT h.job_id AS job_id, h.t AS t,
           arraySort(x -> (x.1, x.2, x.3, x.4), groupArrayIf((toUInt8(g.xid != ifNull(ff.xid, 0)), abs(g.t - h.t), h.node, h.gpu),
                                                             g.xid > 0)) AS xids,
           arraySort(x -> (x.1, x.2, x.3), groupArrayIf((abs(g.t - h.t), h.node, h.gpu), g.lost)) AS losts
    FROM held_at AS h
    INNER JOIN (SELECT node, toInt64(gpu) AS gpu, toUnixTimestamp64Milli(ts) - {node_offset_ms} AS t,
                       ifNull(xid, 0) AS xid, ifNull(lost, false) AS lost
                FROM raw_gpu FINAL
                WHERE cluster = '{cluster}' AND (xid IS NOT NULL OR lost)
                  AND node IN (SELECT node FROM held_at)
                  AND ts >= fromUnixTimestamp64Milli((SELECT min(t) FROM f) - {fault_evidence_ms} - (SELECT skew FROM tmp_span))
                  AND ts <= fromUnixTimestamp64Milli((SELECT max(t) FROM f) + {fault_evidence_ms} + (SELECT skew FROM tmp_span))
               ) AS g ON h.node = g.node AND h.gpu = g.gpu
    INNER JOIN f AS ff ON h.job_id = ff.job_id AND h.t = ff.t
    WHERE abs(g.t - h.t) <= {fault_evidence_ms} AND ff.nth = 1
    GROUP BY job_id, t
),
nic_ev AS (  -- ports of the job's nodes not ACTIVE, nearest first
    SELECT h.job_id AS job_id, h.t AS t,
           arraySort(x -> (x.1, x.2, x.3, x.4), groupArray((abs(n.t - h.t), h.node, n.device, n.port))) AS downs
    FROM (SELECT DISTINCT job_id, t, node FROM held_at) AS h
    INNER JOIN (SELECT node, device, port, toUnixTimestamp64Milli(ts) - {node_offset_ms} AS t
                FROM raw_nic FINAL
                WHERE cluster = '{cluster}' AND state IS NOT NULL AND state != 'ACTIVE'
                  AND node IN (SELECT node FROM held_at)
                  AND ts >= fromUnixTimestamp64Milli((SELECT min(t) FROM f) - {fault_evidence_ms} - (SELECT skew FROM tmp_span))
                  AND ts <= fromUnixTimestamp64Milli((SELECT max(t) FROM f) + {fault_evidence_ms} + (SELECT skew FROM tmp_span))
               ) AS n ON h.node = n.node
    WHERE abs(n.t - h.t) <= {fault_evidence_ms}
    GROUP BY job_id, t
),
released AS (  -- node_lost: the one node released first near the fault while the job held others
    SELECT h.job_id AS job_id, h.t AS t, uniqExact(h.node) AS held,
           arraySort(groupArrayIf((r.t, h.node), r.t > 0 AND abs(r.t - h.t) <= {fault_evidence_ms})) AS rs,
           arrayFilter(x -> x.1 = rs[1].1, rs) AS firsts,
           if(length(arrayDistinct(arrayMap(x -> x.2, firsts))) = 1, firsts[1].2, '') AS rel
    FROM held_at AS h
    LEFT JOIN (SELECT job_id, node, t FROM tmp_events WHERE event = 'released') AS r
        ON h.job_id = r.job_id AND h.node = r.node
    GROUP BY job_id, t
),
piece_cost AS (
    SELECT p.job_id AS job_id, p.kind AS part, p.o1 - p.o0 AS ms,
           toInt64(round((p.o1 - p.o0) / 1000 * ifNull(d.price_per_gpu_hour, 0) / 3600 * 1e9)) AS nano,
           if(p.kind = 'lost', p.o1, p.o0) AS at
    FROM (SELECT job_id, node, o0, o1,
                 multiIf(phase = 'retry_waste' AND startsWith(evidence, 'lost progress: '), 'lost',
                         phase = 'retry_waste', 'restart', 'held') AS kind
          FROM tmp_pieces
          WHERE phase = 'retry_waste'
             OR (phase = 'idle' AND (startsWith(evidence, 'held after failed: ')
                                     OR startsWith(evidence, 'held after preempted: ')))) AS p
    LEFT JOIN dim_nodes AS d ON p.node = d.node
),
fault_t AS (SELECT DISTINCT job_id, t FROM f),
cost AS (
    SELECT job_id, t, sumIf(ms, part = 'lost') AS lost_ms, sumIf(ms, part = 'restart') AS restart_ms,
           sumIf(ms, part = 'held') AS held_ms, sum(nano) AS nano
    FROM (
        SELECT c.job_id AS job_id, x.t AS t, c.part AS part, c.ms AS ms, c.nano AS nano
        FROM (SELECT * FROM piece_cost WHERE part = 'lost') AS c
        ASOF INNER JOIN fault_t AS x ON c.job_id = x.job_id AND x.t >= c.at
        UNION ALL
        SELECT c.job_id, x.t, c.part, c.ms, c.nano
        FROM (SELECT * FROM piece_cost WHERE part != 'lost') AS c
        ASOF INNER JOIN fault_t AS x ON c.job_id = x.job_id AND x.t <= c.at
    ) GROUP BY job_id, t
)
SELECT '{cluster}', f.job_id, f.attempt, fromUnixTimestamp64Milli(f.t), f.event, f.kind,
       if(f.kind = 'preemption', 'scheduler', 'job'), f.reason, f.xid, f.exit_code,
       multiIf(f.ev_node != '', f.ev_node, notEmpty(ifNull(g.xids, [])), g.xids[1].3,
               notEmpty(ifNull(g.losts, [])), g.losts[1].2, notEmpty(ifNull(n.downs, [])), n.downs[1].2,
               f.kind = 'node_lost' AND r.rel != '' AND r.held > 1, r.rel, '') AS node_,
       multiIf(notEmpty(ifNull(g.xids, [])) AND g.xids[1].3 = node_, toInt32(g.xids[1].4),
               notEmpty(ifNull(g.losts, [])) AND g.losts[1].2 = node_, toInt32(g.losts[1].3), NULL),
       if((arrayFirst(x -> x.2 = node_, ifNull(n.downs, [])) AS nd).2 = '', '', concat(nd.3, ':', toString(nd.4))),
       multiIf(f.ev_node != '', 'event', notEmpty(ifNull(g.xids, [])), 'xid', notEmpty(ifNull(g.losts, [])), 'gpu_lost',
               notEmpty(ifNull(n.downs, [])), 'nic_down', node_ != '', 'released', ''),
       ifNull(c.lost_ms, 0) / 1000, ifNull(c.restart_ms, 0) / 1000, ifNull(c.held_ms, 0) / 1000,
       (ifNull(c.lost_ms, 0) + ifNull(c.restart_ms, 0)) / 1000, ifNull(c.nano, 0) / 1e9
FROM f
LEFT JOIN gpu_ev AS g ON f.job_id = g.job_id AND f.t = g.t AND f.nth = 1
LEFT JOIN nic_ev AS n ON f.job_id = n.job_id AND f.t = n.t AND f.nth = 1
LEFT JOIN released AS r ON f.job_id = r.job_id AND f.t = r.t AND f.nth = 1
LEFT JOIN cost AS c ON f.job_id = c.job_id AND f.t = c.t AND f.nth = 1
SETTINGS join_use_nulls = 1
;;
-- Repeat offenders: a node (scope 'node') or GPU (scope 'gpu') whose failure (owner 'job', located)
-- came within {repeat_window_ms} ms of its previous one. Rebuilt for the whole cluster from `faults` each
-- run (faults are few), so a late failure of another job counts wherever it falls.
DELETE FROM {delete_from[fault_repeats]} WHERE cluster = '{cluster}'
;;
INSERT INTO fault_repeats (cluster, scope, node, gpu, failures, repeats, max_in_window, first_failure,
                           last_failure, window_s, gpu_seconds, kinds, jobs)
SELECT '{cluster}', scope, node, gpu, toUInt32(length(ts)), toUInt32(rep), toUInt32(most),
       fromUnixTimestamp64Milli(ts[1]), fromUnixTimestamp64Milli(ts[-1]), {repeat_window_ms} / 1000,
       us / 1e6, kinds, jobs
FROM (
    SELECT scope, node, gpu, arraySort(groupArray(t)) AS ts,
           arrayCount(i -> i > 1 AND ts[i] - ts[i - 1] <= {repeat_window_ms}, arrayEnumerate(ts)) AS rep,
           arrayMax(arrayMap(x -> arrayCount(y -> y >= x AND y - x <= {repeat_window_ms}, ts), ts)) AS most,
           sum(us) AS us, arraySort(groupUniqArray(kind)) AS kinds, arraySort(groupUniqArray(job_id)) AS jobs
    FROM (
        SELECT 'node' AS scope, node, CAST(NULL AS Nullable(Int32)) AS gpu, toUnixTimestamp64Milli(ts) AS t, kind,
               job_id, toInt64(round(gpu_seconds * 1e6)) AS us
        FROM faults WHERE cluster = '{cluster}' AND owner = 'job' AND node != ''
        UNION ALL
        SELECT 'gpu', node, gpu, toUnixTimestamp64Milli(ts), kind, job_id, toInt64(round(gpu_seconds * 1e6))
        FROM faults WHERE cluster = '{cluster}' AND owner = 'job' AND node != '' AND gpu IS NOT NULL
    )
    GROUP BY scope, node, gpu
)
WHERE rep > 0
