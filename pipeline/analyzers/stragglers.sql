-- Straggler episodes (goodput.sql 10b): who straggled, when, how much slower, and what it cost the rest of
-- the gang (the comm_stall goodput.sql attributed to it). Same conventions as rollups.sql.
DELETE FROM {delete_from[straggler_episodes]} WHERE cluster = '{cluster}' AND job_id IN ({alive_jobs})
;;
INSERT INTO straggler_episodes (cluster, job_id, rank, node, gpu, start, end, kind, steps, slowdown_pct, score,
                                gross, cost_gpu_seconds)
SELECT '{cluster}', e.job_id, e.rank, e.node, e.gpu, toDateTime(intDiv(e.wi_lo * {W}, 1000)),
       toDateTime(intDiv((e.wi_hi + 1) * {W}, 1000)), e.kind, e.steps, 100 * (e.ratio - 1), 1 / e.ratio,
       1 / e.ratio < {straggler_score}, ifNull(c.us, 0) / 1e6
FROM tmp_straggler_episodes AS e
LEFT JOIN (SELECT r.job_id AS job_id, r.straggler_rank AS rank, x.wi_lo AS wi_lo,
                  sum(toInt64(round(r.secs * r.l * r.p_comm * 1e6))) AS us
           FROM tmp_run_split AS r INNER JOIN tmp_straggler_episodes AS x
               ON r.job_id = x.job_id AND r.straggler_rank = x.rank
           WHERE r.wi BETWEEN x.wi_lo AND x.wi_hi AND NOT r.no_data
           GROUP BY job_id, rank, wi_lo) AS c
    ON e.job_id = c.job_id AND e.rank = c.rank AND e.wi_lo = c.wi_lo
