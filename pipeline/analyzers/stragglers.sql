-- Straggler episodes (goodput.sql 10b, 10c): who straggled, when, how much slower, and what it cost the rest
-- of the gang (the comm_stall goodput.sql attributed to it). Same conventions as rollups.sql.
DELETE FROM {delete_from[straggler_episodes]} WHERE cluster = '{cluster}' AND job_id IN ({alive_jobs})
;;
INSERT INTO straggler_episodes (cluster, job_id, source, rank, node, gpu, start, end, kind, steps, slowdown_pct,
                                score, gross, cost_gpu_seconds)
SELECT '{cluster}', e.job_id, e.src, e.rank, e.node, e.gpu, toDateTime(intDiv(e.wi_lo * {W}, 1000)),
       toDateTime(intDiv((e.wi_hi + 1) * {W}, 1000)), e.kind, e.steps, 100 * (e.ratio - 1), 1 / e.ratio,
       1 / e.ratio < {straggler_score}, ifNull(c.us, 0) / 1e6
FROM tmp_straggler_episodes AS e
LEFT JOIN (SELECT episode, sum(toInt64(round(secs * l * p_comm * 1e6))) AS us
           FROM tmp_run_split WHERE blamed AND NOT no_data GROUP BY episode) AS c
    ON e.episode = c.episode
