"""Samples every task's CPU seconds and the loopback bytes on a timed series, read back at any marker's time.

The harness once sampled CPU and bytes when it *read* a marker line; on a loaded
machine it reads late, so a short window came out cut. Here a thread samples
on its own clock (each sample stamped with the wall-clock time it was taken),
and a marker's CPU and bytes are interpolated at the time the *task* stamped
on it: the window is the task's, whenever the line is read. Tasks that print
no markers (the ps) are sampled the same way.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable

import psutil

# Often enough that interpolating between two samples is exact to a few ms of CPU in a multi-second window.
SAMPLE_SECS = 0.1


class ResourceClock:
    """A daemon thread sampling ``{task: cpu_s}`` (and loopback bytes, when counted) every ``SAMPLE_SECS``.

    Args:
        count_bytes: a callable returning the bytes sent so far, or None not to count bytes.
    """

    def __init__(self, count_bytes: Callable[[], int] | None = None):
        self._count_bytes = count_bytes
        self._pids: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.times: list[float] = []
        self.cpu: list[dict] = []
        self.bytes: list[int | None] = []
        self._thread = threading.Thread(target=self._loop, name="resource-clock", daemon=True)
        self._thread.start()

    def track(self, name: str, pid: int) -> None:
        """Samples process ``pid`` (and all its threads) as task ``name`` from now on."""
        with self._lock:
            self._pids[name] = pid
        self.sample()

    def sample(self) -> None:
        """Takes one sample now (also called by the thread)."""
        with self._lock:
            pids = dict(self._pids)
        cpu = {}
        for name, pid in pids.items():
            try:
                times = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue  # exited: its series ends at its last sample
            cpu[name] = times.user + times.system
        moved = self._count_bytes() if self._count_bytes else None
        now = time.time()
        with self._lock:
            self.times.append(now)
            self.cpu.append(cpu)
            self.bytes.append(moved)

    def stop(self) -> None:
        """Ends the sampling thread (bounded by one sample's time)."""
        self._stop.set()
        self._thread.join(timeout=5.0)

    def cpu_at(self, when: float) -> dict:
        """Each task's CPU seconds at ``when``, for the tasks sampled on both sides of it."""
        with self._lock:
            return interpolate_cpu(self.times, self.cpu, when)

    def bytes_at(self, when: float) -> float | None:
        """The loopback bytes sent by ``when``, or None where not counted or not bracketed by samples."""
        with self._lock:
            series = [(t, b) for t, b in zip(self.times, self.bytes, strict=True) if b is not None]
        return interpolate([t for t, _ in series], [b for _, b in series], when)

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_SECS):
            self.sample()


def interpolate(times: list, values: list, when: float) -> float | None:
    """The linear interpolation of ``values`` (sampled at sorted ``times``) at ``when``; None outside them."""
    if not times or when < times[0] or when > times[-1]:
        return None
    right = bisect.bisect_left(times, when)
    if times[right] == when:
        return float(values[right])
    left = right - 1
    share = (when - times[left]) / (times[right] - times[left])
    return values[left] + share * (values[right] - values[left])


def interpolate_cpu(times: list, samples: list, when: float) -> dict:
    """``{task: cpu_s}`` at ``when`` from per-sample dicts; a task counts where it has samples on both sides."""
    result = {}
    for name in sorted({task for sample in samples for task in sample}):
        series = [(t, s[name]) for t, s in zip(times, samples, strict=True) if name in s]
        value = interpolate([t for t, _ in series], [v for _, v in series], when)
        if value is not None:
            result[name] = value
    return result
