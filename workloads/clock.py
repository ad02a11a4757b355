"""The wall clock a load process shares with its master (time.time_ns), and the offset estimate between two hosts.

Each process times its requests on its own perf_counter; the run's t0 travels between hosts as a
wall-clock instant, so two hosts agree on t0 only as well as their wall clocks agree. A worker measures
its offset to the master NTP-style: it sends its wall time t1, the master answers with its own t2, the
worker reads t3 on receipt; offset = t2 − (t1 + t3)/2 with an error of at most half the round trip
(rtt = t3 − t1). The sample with the smallest round trip is kept (Cristian's algorithm).

HARNESS_TEST_CLOCK_SKEW_NS shifts this process's wall clock (tests only: it emulates a host whose clock
is off, to check that the offset is measured and applied).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass

_SKEW_NS = int(os.environ.get("HARNESS_TEST_CLOCK_SKEW_NS", "0") or 0)


def wall_ns() -> int:
    return time.time_ns() + _SKEW_NS


@dataclass(frozen=True)
class ClockOffset:
    offset_ns: int  # master's wall clock minus this host's
    rtt_ns: int  # round trip of the sample the offset came from; |error| <= rtt_ns / 2
    samples: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def estimate_offset(samples: list[tuple[int, int, int]]) -> ClockOffset:
    """`samples`: (t1 worker send, t2 master, t3 worker receive) in wall ns; the least-delayed sample wins."""
    if not samples:
        raise ValueError("no clock samples")
    t1, t2, t3 = min(samples, key=lambda s: s[2] - s[0])
    return ClockOffset(offset_ns=int(t2 - (t1 + t3) // 2), rtt_ns=int(t3 - t1), samples=len(samples))
