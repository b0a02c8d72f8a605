"""Replays a derived event list through Google's ml-goodput-measurement, offline.

Run with the interpreter of a venv that has `ml-goodput-measurement==0.2.3` (not this project's):

    /tmp/mlgp/bin/python bench/ml_goodput_adapter.py IN.json OUT.json

IN.json: {"job": name, "start_s": epoch seconds of t = 0, "calls": [{"t": seconds, "call": ..., ...}]}
in time order, as bench/cross_check_ml_goodput.py writes it. Each call goes through a `GoodputRecorder`
(or, for a checkpoint save, is the entry Orbax's checkpoint manager would write through the same
logger); a `GoodputCalculator` then reads everything back. Both get `cloud_logger=` an in-memory object
with the two methods they use of `goodput._CloudLogger` (`write_cloud_logging_entry`,
`read_cloud_logging_entries`), so nothing reaches Cloud Logging and no credentials are needed.

OUT.json: {"goodput_pct", "total_s", "productive_s", "badput_s": {BadputType name: seconds},
"disruptions", "max_productive_step"}.
"""

import datetime
import json
import sys
import tempfile

from ml_goodput_measurement.src import goodput
from ml_goodput_measurement.src.goodput_utils import BadputType, GoodputType, MetricType


class MemoryLogger:
    """Stands in for goodput._CloudLogger: entries kept in a list, in the order written."""

    def __init__(self, job_name):
        self.job_name = job_name
        self.job_start_time = None
        self.entries = []

    def write_cloud_logging_entry(self, entry):
        if entry is not None and entry.get("job_name") == self.job_name:
            self.entries.append(dict(entry))

    def flush(self):
        pass

    def read_cloud_logging_entries(self, start_time=None, end_time=None, last_entry_info=None):
        skip = int(last_entry_info[1]) + 1 if last_entry_info and last_entry_info[1] is not None else 0
        out = self.entries[skip:]
        if not out:
            return [], (None, None)
        return out, (datetime.datetime.now(datetime.timezone.utc), str(len(self.entries) - 1))


def at(start_s, t):
    return datetime.datetime.fromtimestamp(start_s + t, tz=datetime.timezone.utc)


def replay(spec):
    job, start_s = spec["job"], spec["start_s"]
    log = MemoryLogger(job)
    rec = goodput.GoodputRecorder(job, "goodput-crosscheck", logging_enabled=True, cloud_logger=log)
    for c in spec["calls"]:
        when = at(start_s, c["t"])
        call = c["call"]
        if call == "step":
            rec.record_step_start_time(c["step"], when)
        elif call == "checkpoint_save":
            # what orbax's CheckpointManager logs (event_type save) and CheckpointBadputCalculator reads
            log.write_cloud_logging_entry(
                {
                    "job_name": job,
                    "event_type": "save",
                    "step": c["step"],
                    "directory": "gs://crosscheck/ckpt",
                    "checkpoint_manager_blocking_duration_secs": c["duration_s"],
                    "checkpointer_blocking_duration_secs": c["duration_s"],
                    "wait_for_prev_duration_secs": 0.0,
                    "get_old_steps_duration_secs": 0.0,
                }
            )
        else:  # record_job_start_time, record_tpu_init_end_time, ...: the recorder's own methods
            getattr(rec, call)(when)
    with tempfile.TemporaryDirectory(prefix="mlgp-cache-") as cache:
        calc = goodput.GoodputCalculator(job, "goodput-crosscheck", cloud_logger=log, cache_dir=cache)
        pct, _breakdown, max_step = calc.get_job_goodput(include_badput_breakdown=True)
        details = calc.get_job_goodput_details()
    badput = {}
    for kind, value in details[MetricType.BADPUT_TIME.value].items():
        if isinstance(value, dict):  # custom badput events: {user type: seconds}
            for sub, s in value.items():
                badput[f"CUSTOM_BADPUT_EVENTS.{sub}"] = float(s)
        else:
            badput[BadputType(kind).name] = float(value)
    return {
        "goodput_pct": pct,
        "total_s": details[MetricType.TOTAL_ELAPSED_TIME.value],
        "productive_s": details[MetricType.GOODPUT_TIME.value][GoodputType.TOTAL],
        "badput_s": badput,
        "disruptions": details[MetricType.DISRUPTION_COUNT.value],
        "max_productive_step": max_step,
    }


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    with open(sys.argv[2], "w") as f:
        json.dump(replay(spec), f, indent=1)
