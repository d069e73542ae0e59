"""A PNG chart of a run: loss and global steps/s over time, one line per worker.

warm_up()                                   # at launch: matplotlib's imports, in a thread
write_progress_chart(progress, path)        # at the end: only this chart's own drawing is left

Drawn with matplotlib's object-oriented API (a Figure on an Agg canvas), not pyplot:
no global figure state, so a chart can be drawn from any thread, and pyplot's
backend machinery is never imported.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

_warm_up: threading.Thread | None = None


def warm_up() -> None:
    """Starts importing matplotlib in a background thread, so that the run's chart costs only its drawing.

    Call it after anything that needs this process single-threaded (entering a user namespace).
    """
    global _warm_up
    if _warm_up is None:
        _warm_up = threading.Thread(target=_import_matplotlib, name="chart-warm-up")
        _warm_up.start()


def _import_matplotlib() -> None:
    try:
        _canvas_and_figure()
    except Exception:  # noqa: BLE001 - a warm-up only; the real chart reports its own errors
        pass


def _canvas_and_figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    return FigureCanvasAgg, Figure


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
        _warm_up.join()  # its imports are under way: wait for them rather than import beside them
    _draw(series, path)
    return True


def new_figure(figsize: tuple[float, float]):
    """Returns a matplotlib ``Figure`` on an Agg canvas: every chart of the project is drawn on one.

    Args:
        figsize: width and height in inches.
    """
    canvas_type, figure_type = _canvas_and_figure()
    figure = figure_type(figsize=figsize)
    canvas_type(figure)  # Agg: no display, as in terminals and CI
    return figure


def _draw(series: Mapping[str, Sequence[dict]], path) -> None:
    start = min(r["time"] for records in series.values() for r in records)
    figure = new_figure((8, 6))
    loss_axes, rate_axes = figure.subplots(2, 1, sharex=True)
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


def _plot(axes, records: Sequence[dict], key: str, start: float, label: str) -> None:
    points = [(r["time"] - start, r[key]) for r in records if isinstance(r.get(key), (int, float))]
    if points:
        xs, ys = zip(*points, strict=True)
        axes.plot(xs, ys, label=label, linewidth=1.2)
