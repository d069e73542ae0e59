"""Progress records of an estimator's work other than training: an export, an evaluation, predictions.

A serving job restores the trained model and exports it, an evaluation job
evaluates a checkpoint, a batch job predicts: none trains, and the estimator
logs what it did at INFO, which TensorFlow does not print by default. Under a
launcher (``progress_hook.wanted()``) ``install()`` has the estimator's
public calls print one progress record each when they are done, which the
launcher's verdict reads as the job's work (ps_toolkit/launch/work_evidence.py):

    ps_toolkit progress: {"work": "exported", "checkpoint": ".../model.ckpt-1000", "path": ".../export/1700000000"}
    ps_toolkit progress: {"work": "evaluated", "checkpoint": "...", "global_step": 1000}
    ps_toolkit progress: {"work": "predicted", "checkpoint": "...", "count": 200}

Run by hand, nothing is printed; the calls' results are never changed.
"""

from __future__ import annotations

import functools
import json
import sys
import time

from ps_toolkit.base.progress_lines import PROGRESS_PREFIX
from ps_toolkit_compat import estimator_support, progress_hook

# The estimator's public export calls (export_savedmodel is TF 1.x's name); each returns the export folder.
EXPORT_CALLS = ("export_saved_model", "experimental_export_all_saved_models", "export_savedmodel")
_MARK = "_ps_toolkit_work_record"


def print_work(work: str, checkpoint, stream=None, **fields) -> None:
    """Prints one work record (see the module docstring) on ``stream`` (sys.stdout by default)."""
    record = {"work": work, "checkpoint": None if checkpoint is None else str(checkpoint), "time": time.time()}
    record.update(fields)
    stream = stream or sys.stdout
    stream.write(PROGRESS_PREFIX + json.dumps(record) + "\n")
    stream.flush()


def _checkpoint(estimator, given):
    """The checkpoint a call restores: the one given, else the model dir's latest (as the estimator picks)."""
    try:
        return given or estimator.latest_checkpoint()
    except Exception:  # noqa: BLE001 - a record's detail; the call itself already succeeded
        return given


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _wrap_export(original):
    @functools.wraps(original)
    def export(self, *args, **kwargs):
        path = original(self, *args, **kwargs)
        if progress_hook.wanted():
            print_work("exported", _checkpoint(self, kwargs.get("checkpoint_path")), path=_text(path))
        return path

    return export


def _wrap_evaluate(original):
    @functools.wraps(original)
    def evaluate(self, *args, **kwargs):
        metrics = original(self, *args, **kwargs)
        if progress_hook.wanted():
            step = metrics.get("global_step") if isinstance(metrics, dict) else None
            step = int(step) if step is not None else None
            print_work("evaluated", _checkpoint(self, kwargs.get("checkpoint_path")), global_step=step)
        return metrics

    return evaluate


def _wrap_predict(original):
    @functools.wraps(original)
    def predict(self, *args, **kwargs):
        count = 0
        try:
            for prediction in original(self, *args, **kwargs):
                count += 1
                yield prediction
        finally:  # the caller took what it wanted (it may stop early): that much was predicted
            if count and progress_hook.wanted():
                print_work("predicted", _checkpoint(self, kwargs.get("checkpoint_path")), count=count)

    return predict


def install() -> None:
    """Wraps the loaded estimator's export, evaluate and predict calls. Idempotent."""
    estimator_class = estimator_support.load().v1.Estimator
    if getattr(estimator_class, _MARK, False):
        return
    for name in EXPORT_CALLS:
        if hasattr(estimator_class, name):
            setattr(estimator_class, name, _wrap_export(getattr(estimator_class, name)))
    estimator_class.evaluate = _wrap_evaluate(estimator_class.evaluate)
    estimator_class.predict = _wrap_predict(estimator_class.predict)
    setattr(estimator_class, _MARK, True)
