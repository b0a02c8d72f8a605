-- What a whole run keeps of each of its jobs for the live runs after it (run.py run_live, goodput.sql 2a):
-- the numbers minutes of data cannot give. b* and sigma in half keys (8), the real starts of coarse
-- `running` attempts (3c), the evidence baselines per node in millionths of their thresholds (11a), the
-- clock offsets of the job's nodes (3a). Integers, as the analyzers compare them, so a live run decides
-- at the thresholds as the whole run did. Run after goodput.sql in the same run: it reads its temp tables.
DELETE FROM {delete_from[job_state]} WHERE cluster = '{cluster}' AND job_id IN ({alive_jobs})
;;
INSERT INTO job_state (cluster, job_id, healthy_half_keys, noise_half_keys, starts, baselines, clock_offsets)
SELECT '{cluster}', j.job_id, ifNull(h.bh, 0), ifNull(h.sh, 0), ifNull(s.starts, []), ifNull(b.baselines, []),
       ifNull(c.offsets, [])
FROM tmp_job_numbers AS j
LEFT JOIN tmp_healthy AS h ON j.jn = h.jn
LEFT JOIN (SELECT job_id, arraySort(groupArray((toInt64(attempt), toInt64(real_t)))) AS starts
           FROM tmp_start GROUP BY job_id) AS s ON j.job_id = s.job_id
LEFT JOIN (SELECT e.jn AS jn, arraySort(groupArray((k.node, toInt64(e.base_d), toInt64(e.base_c)))) AS baselines
           FROM tmp_evidence_base AS e INNER JOIN tmp_node_numbers AS k ON e.nn = k.nn
           GROUP BY e.jn) AS b ON j.jn = b.jn
LEFT JOIN (SELECT a.job_id AS job_id, arraySort(groupArray((c.node, c.offset_ms))) AS offsets
           FROM (SELECT DISTINCT job_id, node FROM tmp_alloc) AS a INNER JOIN tmp_clock AS c ON a.node = c.node
           GROUP BY a.job_id) AS c ON j.job_id = c.job_id
SETTINGS join_use_nulls = 1
