"""`goodput` that SIGKILLs itself right before its N-th Kafka commit, for tests/loader/test_crash.py:
`python -m tests.loader.kill_before_commit N [goodput arguments]`.

The loader service commits a batch's offsets only after `Loader.load` returned, so the moment before
the N-th commit is the one window a crash test must hit (rows stored, offsets not committed), and a
wrapper around the consumer's `commit` hits it deterministically. The rest is the real command: the
production code carries no hook for this.
"""

from __future__ import annotations

import os
import signal
import sys

from goodput import cli
from transport.kafka import KafkaConsumerTransport


def kill_before_commit(n: int) -> None:
    """Makes the N-th KafkaConsumerTransport.commit of this process SIGKILL it instead."""
    commit = KafkaConsumerTransport.commit
    calls = 0

    def commit_or_die(self, records):
        nonlocal calls
        calls += 1
        if calls == n:
            print(f"kill_before_commit: SIGKILL before commit {n}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return commit(self, records)

    KafkaConsumerTransport.commit = commit_or_die


if __name__ == "__main__":
    kill_before_commit(int(sys.argv[1]))
    sys.exit(cli.main(sys.argv[2:]))
