"""CPU time of one call, for the tests that hold host-side work on model output linear in its
length (tests/reliability/test_linear_time.py, tests/rollout/test_offsets_linear.py).

Times are ``time.process_time``: this process only, so a busy 2-core CI machine does not count
other processes' work. A machine slower than the one a budget was set on gets a second look
(:meth:`CpuClock.over_budget`) instead of a failure. Time spent in third-party code that a test
does not count as hista's is added to ``CpuClock.excluded`` by that test's wrapper and taken off.
"""

from __future__ import annotations

import signal
import threading
import time


class _Slow(Exception):
    pass


def _raise_slow(signum, frame):
    raise _Slow()


class CpuClock:
    def __init__(self) -> None:
        #: CPU seconds spent in excluded third-party code since the clock was made
        self.excluded = 0.0

    def best_of_3(self, fn, *args, limit: float, guard_s: float) -> float:
        """Best of 3 CPU times of ``fn(*args)`` less excluded time, fewer runs once one is under
        ``limit`` or over ten times it; ``inf`` when a run is stopped after ``guard_s`` seconds
        (by SIGALRM, so only in the main thread), so that a quadratic case fails instead of
        hanging the suite."""
        guard = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
        best = float("inf")
        for _ in range(3):
            previous = signal.signal(signal.SIGALRM, _raise_slow) if guard else None
            if guard:
                signal.setitimer(signal.ITIMER_REAL, guard_s)
            start, excluded = time.process_time(), self.excluded
            try:
                fn(*args)
            except _Slow:
                return float("inf")
            finally:
                if guard:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    signal.signal(signal.SIGALRM, previous)
            best = min(best, time.process_time() - start - (self.excluded - excluded))
            if best < limit or best > 10 * limit:
                break
        return best

    def over_budget(self, fn, arg, quarter, *, limit: float, guard_s: float, growth: float) -> str | None:
        """Why ``fn(arg)`` is too slow, or None: it is not when it costs less than ``limit`` of CPU
        time, or, on a slower machine, less than ``10 * limit`` and at most ``growth`` times
        ``fn(quarter)``, the same input at a quarter of the length (linear work grows 4 times,
        quadratic work 16 times)."""
        t = self.best_of_3(fn, arg, limit=limit, guard_s=guard_s)
        if t == float("inf"):
            return "stopped after %.0f s" % guard_s
        if t >= 10 * limit:
            return "%.3f s" % t
        if t >= limit:
            q = self.best_of_3(fn, quarter, limit=t / growth, guard_s=guard_s)
            if t > growth * q:
                return "%.3f s, %.1f times its quarter-length version" % (t, t / q)
        return None
