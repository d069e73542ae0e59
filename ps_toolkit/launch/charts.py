"""A PNG chart of a run: loss and global steps/s over time, one line per worker."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


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
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def _plot(axes, records: Sequence[dict], key: str, start: float, label: str) -> None:
    points = [(r["time"] - start, r[key]) for r in records if isinstance(r.get(key), (int, float))]
    if points:
        xs, ys = zip(*points, strict=True)
        axes.plot(xs, ys, label=label, linewidth=1.2)
