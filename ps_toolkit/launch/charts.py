"""A PNG chart of a run: loss and global steps/s over time, one line per worker.

warm_up()                                   # at launch: imports and first-draw caches, in a thread
write_progress_chart(progress, path)        # at the end: only this chart's own drawing is left
"""

from __future__ import annotations

import io
import threading
from collections.abc import Mapping, Sequence

_warm_up: threading.Thread | None = None


def warm_up() -> None:
    """Starts drawing a throwaway chart in a background thread: matplotlib's imports and the caches of
    its first figure (fonts, text layout) are then ready when the run's chart is drawn.

    Call it after anything that needs this process single-threaded (entering a user namespace).
    """
    global _warm_up
    if _warm_up is None:
        _warm_up = threading.Thread(target=_draw_throwaway, name="chart-warm-up")
        _warm_up.start()


def _draw_throwaway() -> None:
    records = [{"time": 0.0, "loss": 1.0, "steps_per_sec": 1.0}, {"time": 1.0, "loss": 0.5, "steps_per_sec": 2.0}]
    try:
        _draw({"worker:0": records}, io.BytesIO())
    except Exception:  # noqa: BLE001 - a warm-up only; the real chart reports its own errors
        pass


def write_progress_chart(progress: Mapping[str, Sequence[dict]], path: str) -> bool:
    """Draws each task's progress records (``time``, ``loss``, ``steps_per_sec``) to ``path``.

    Returns False, writing nothing, when no task reported progress.
    """
    series = {
        name: [r for r in records if isinstance(r.get("time"), (int, float))] for name, records in progress.items()
    }
    series = {name: records for name, records in series.items() if records}
    if not series:
        return False
    if _warm_up is not None:
        _warm_up.join()  # pyplot is not thread-safe: one figure at a time
    _draw(series, path)
    return True


def _draw(series: Mapping[str, Sequence[dict]], path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: this runs in terminals and CI
    from matplotlib import pyplot as plt

    start = min(r["time"] for records in series.values() for r in records)
    figure, (loss_axes, rate_axes) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    for name, records in sorted(series.items()):
        _plot(loss_axes, records, "loss", start, name)
        _plot(rate_axes, records, "steps_per_sec", start, name)
    loss_axes.set_ylabel("loss")
    loss_axes.set_title("training progress per worker")
    rate_axes.set_ylabel("global steps/s")
    rate_axes.set_xlabel("seconds since the first progress line")
    for axes in (loss_axes, rate_axes):
        axes.grid(True, alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(loc="best", fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100, format="png")
    plt.close(figure)


def _plot(axes, records: Sequence[dict], key: str, start: float, label: str) -> None:
    points = [(r["time"] - start, r[key]) for r in records if isinstance(r.get(key), (int, float))]
    if points:
        xs, ys = zip(*points, strict=True)
        axes.plot(xs, ys, label=label, linewidth=1.2)
