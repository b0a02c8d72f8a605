"""Says in the log when sending to Kafka starts failing and when it recovers.

Why: during a broker outage the producer retries on its own for its whole delivery timeout (120 s by
default), so nothing failed as far as the sender could tell and the log said nothing; only the spool
gauge showed it. An operator reading `journalctl -u goodput-agent` must see the outage begin and end.

Rate-limited so a long outage costs a handful of lines, not one per round: one warning when sending
starts failing, a reminder at most every `remind_s` while it lasts, one info line when a batch is
delivered again (with how long it lasted).
"""

from __future__ import annotations

import logging
import time
from typing import Callable

log = logging.getLogger("agents.sender")


class OutageLog:
    def __init__(self, *, remind_s: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.remind_s = remind_s
        self.clock = clock
        self._since: float | None = None
        self._reminded = 0.0

    @property
    def failing(self) -> bool:
        return self._since is not None

    def failed(self, why: str, waiting: int) -> None:
        """Sending failed (or made no progress) for `why`; `waiting` batches are in the spool."""
        now = self.clock()
        if self._since is None:
            self._since = self._reminded = now
            log.warning(
                "Kafka is not taking batches (%s); they wait in the spool (%d now) and are sent when it "
                "answers again",
                why,
                waiting,
                extra={"outage": "started"},
            )
        elif now - self._reminded >= self.remind_s:
            self._reminded = now
            log.warning(
                "Kafka has not taken batches for %.0f s (%s); %d wait in the spool",
                now - self._since,
                why,
                waiting,
                extra={"outage": "ongoing", "outage_s": round(now - self._since)},
            )

    def delivered(self, waiting: int) -> None:
        """A batch was delivered: ends an outage, if one was going on."""
        if self._since is None:
            return
        lasted = self.clock() - self._since
        self._since = None
        log.info(
            "Kafka is taking batches again after %.0f s; %d batches in the spool to send",
            lasted,
            waiting,
            extra={"outage": "ended", "outage_s": round(lasted)},
        )
