-- Roll-ups of goodput_windows for reports and dashboards. Same conventions as goodput.sql.
-- {alive_jobs} is the jobs goodput.sql read (tmp_events), and a statement naming it runs once per slice
-- of them: one slice, the subquery, on one server; literal job ids on the cluster layout (run.py says why).
DELETE FROM {delete_from[job_summary]} WHERE cluster = '{cluster}' AND job_id IN ({alive_jobs})
;;
INSERT INTO job_summary (cluster, job_id, account, team, pool, gpus, attempts, first_allocated, last_seen,
                         allocated_gpu_seconds, {category_columns}, cost, waste_cost, goodput_pct,
                         sm_active_pct, healthy_busy_pct, clock_offset_s)
SELECT '{cluster}', w.job_id, min(w.account), min(w.team),
       (sumMap([w.pool], [w.us]) AS pm).1[indexOf(pm.2, arrayMax(pm.2))],
       if(any(ag.gpus) > 0, any(ag.gpus), any(ev.requested)), any(ev.attempts), any(ev.first_alloc), max(w.window_start),
       sum(w.us) / 1e6, {category_sums},
       sum(w.nano) / 1e9, sumIf(w.nano, w.category != 'productive') / 1e9,
       100 * sumIf(w.us, w.category = 'productive') / greatest(sum(w.us), 1),
       ifNull(any(h.b_mean), 0), ifNull(any(h.b_star), 0), ifNull(any(ck.off), 0) / 1000
FROM (SELECT *, toInt64(round(gpu_seconds * 1e6)) AS us, toInt64(round(cost * 1e9)) AS nano
      FROM goodput_windows WHERE cluster = '{cluster}' AND job_id IN (SELECT job_id FROM tmp_events)) AS w
INNER JOIN (SELECT job_id, max(attempt) AS attempts,
                   toDateTime(intDiv(minIf(t, event = 'allocated'), 1000)) AS first_alloc,
                   max(gpus_requested) AS requested
            FROM tmp_events GROUP BY job_id) AS ev ON w.job_id = ev.job_id
LEFT JOIN (SELECT job_id, max(n) AS gpus FROM (  -- GPUs actually allocated, the most of any attempt
               SELECT job_id, attempt, uniqExact(node, gpu) AS n FROM tmp_alloc WHERE a1 > a0
               GROUP BY job_id, attempt)
           GROUP BY job_id) AS ag ON w.job_id = ag.job_id
LEFT JOIN tmp_healthy AS h ON w.job_id = h.job_id
LEFT JOIN (SELECT a.job_id AS job_id, argMax(c.offset_ms, abs(c.offset_ms)) AS off  -- goodput.sql 3a
           FROM (SELECT DISTINCT job_id, node FROM tmp_alloc) AS a INNER JOIN tmp_clock AS c ON a.node = c.node
           GROUP BY job_id) AS ck ON w.job_id = ck.job_id
WHERE w.cluster = '{cluster}'
GROUP BY w.job_id
;;
DELETE FROM {delete_from[team_day]} WHERE cluster = '{cluster}'
    AND day >= toDate(toDateTime(intDiv(toInt64({day_lo}), 1000), 'UTC')) AND day <= toDate(toDateTime(intDiv(toInt64({day_hi}), 1000), 'UTC'))
;;
INSERT INTO team_day (cluster, day, team, pool, category, gpu_hours, cost)
SELECT '{cluster}', toDate(window_start) AS day, team, pool, category,
       sum(toInt64(round(gpu_seconds * 1e6))) / 1e6 / 3600, sum(toInt64(round(cost * 1e9))) / 1e9
FROM goodput_windows
WHERE cluster = '{cluster}'
  AND day >= toDate(toDateTime(intDiv(toInt64({day_lo}), 1000), 'UTC')) AND day <= toDate(toDateTime(intDiv(toInt64({day_hi}), 1000), 'UTC'))
GROUP BY day, team, pool, category
;;
DELETE FROM {delete_from[scheduling_delay]} WHERE cluster = '{cluster}' AND job_id IN ({alive_jobs})
;;
INSERT INTO scheduling_delay (cluster, job_id, team, pool, queue, priority, gpus_requested, submitted,
                              first_allocated, gang_complete, queue_wait_s, gang_wait_s)
SELECT '{cluster}', e.job_id, ifNull(a.team, '{default_team}'), ifNull(d.pool, e.queue), e.queue, e.priority,
       e.gpus_requested, fromUnixTimestamp64Milli(e.submitted),
       if(e.first_alloc > 0, fromUnixTimestamp64Milli(e.first_alloc), NULL),
       if(e.gang > 0, fromUnixTimestamp64Milli(e.gang), NULL),
       if(e.first_alloc > 0, (e.first_alloc - e.submitted) / 1000, NULL),
       if(e.gang > 0 AND e.first_alloc > 0, (e.gang - e.first_alloc) / 1000, NULL)
FROM (SELECT job_id, argMinIf(queue, (t, o), queue != '') AS queue, max(priority) AS priority,
             max(gpus_requested) AS gpus_requested,
             argMinIf(account, (t, o), account != '') AS account, minIf(t, event = 'submitted') AS submitted,
             minIf(t, event = 'allocated') AS first_alloc, minIf(t, event = 'gang_complete' AND attempt = 1) AS gang,
             argMinIf(node, (t, o), event = 'allocated') AS a_node
      FROM tmp_events GROUP BY job_id HAVING countIf(event = 'submitted') > 0) AS e
LEFT JOIN dim_accounts AS a ON e.account = a.account
LEFT JOIN dim_nodes AS d ON e.a_node = d.node
SETTINGS join_use_nulls = 1
