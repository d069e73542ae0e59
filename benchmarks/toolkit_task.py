"""One ps_toolkit task for the benchmark: ``scripts/run_task.py`` exactly as shipped, timed by the harness.

    python -m benchmarks.toolkit_task --ps_hosts=... --worker_hosts=... --job_name=worker --task_index=0 ...

It takes run_task.py's flags and runs run_task.py's own ``main``: the same flag
defaults (``--steps_per_run`` 20, async and sync; a checkpoint every 100 steps),
preflight, runner, ``trainer.train``, summary flush, done signal and fast exit.
The one addition is the harness's step clock (benchmarks/protocol.py), which
every benchmarked system prints the same way. It listens through
``trainer.train``'s public ``on_progress`` argument, called after each
``session.run``; the toolkit's own progress lines come once a second, too
coarse to time a first step or a last one.
"""

from __future__ import annotations

import importlib.util

from benchmarks import protocol


def load_run_task():
    """The run_task tool as a module (not ``__main__``, so it does not start by itself)."""
    return importlib.import_module("ps_toolkit.tools.run_task")


def timed(train):
    """``train`` (ps_toolkit.task.roles.trainer.train) printing the harness's markers for this replica."""

    def timed_train(cluster, target, config, definition, session_config=None, on_progress=None, **options):
        clock = protocol.StepClock(config.train_steps)

        def observe(global_step):
            clock.observe(global_step)
            if on_progress is not None:
                on_progress(global_step)

        result = train(cluster, target, config, definition, session_config, on_progress=observe, **options)
        auc = (result.get("eval") or {}).get("auc")
        clock.finish(accuracy=result["test_accuracy"], loss=result["final_loss"], auc=auc)
        return result

    return timed_train


def with_step_clock(run):
    """Wraps run_task.run so that a training replica's ``trainer.train`` is ``timed``.

    Patched inside ``run``, where run_task.py imports TensorFlow anyway: the
    task's startup is not charged an earlier import.
    """

    def timed_run(cluster, config):
        if cluster.task_type != "ps":
            from ps_toolkit.task.roles import trainer

            trainer.train = timed(trainer.train)
        run(cluster, config)

    return timed_run


def main() -> None:
    run_task = load_run_task()
    run_task.run = with_step_clock(run_task.run)

    run_task.main()


if __name__ == "__main__":
    main()
