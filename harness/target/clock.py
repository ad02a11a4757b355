"""Simulated time of the embedded target: simulated seconds mapped onto perf_counter by a time-scale factor.

wall_s = t0 + time_scale · sim_s, so time_scale 0.1 runs the emulation ten times faster than the
deployment it describes. Every scheduled instant is absolute, so late wake-ups do not accumulate.
"""

from __future__ import annotations

import asyncio
import math
import time

from harness.errors import HarnessError


class SimClock:
    def __init__(self, time_scale: float = 1.0):
        if isinstance(time_scale, bool) or not isinstance(time_scale, (int, float)) or not math.isfinite(time_scale) or time_scale <= 0:
            raise HarnessError(f"time_scale must be a positive number (wall seconds per simulated second), got {time_scale!r}.")
        self.time_scale = float(time_scale)
        self.t0_ns = time.perf_counter_ns()

    def now_s(self) -> float:
        """Simulated seconds since the target started."""
        return (time.perf_counter_ns() - self.t0_ns) / 1e9 / self.time_scale

    def wall_ns(self, sim_s: float) -> int:
        """perf_counter_ns at which simulated instant `sim_s` falls."""
        return self.t0_ns + int(sim_s * self.time_scale * 1e9)

    async def sleep_until(self, sim_s: float) -> None:
        delay_s = (self.wall_ns(sim_s) - time.perf_counter_ns()) / 1e9
        if delay_s > 0:
            await asyncio.sleep(delay_s)
