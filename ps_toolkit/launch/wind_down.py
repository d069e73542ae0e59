"""A run's end after its success: the other tasks end by themselves within bounds, and each one stopped says why.

After the chief's success the workers get ``--grace_secs`` to end by
themselves, and an evaluator gets the longer of that and a bound that follows
its own measured evaluation time (``evaluation_bound_secs``): tf.estimator's
evaluator ends once it has evaluated the final checkpoint, which on a loaded
machine takes longer than a fixed 10 s. The parameter servers then get
``--ps_grace_secs``. A task still running at its bound is stopped, its log
and the verdict saying why (``StopNote``). ``final_evaluation_note`` tells
whether the evaluator evaluated the final checkpoint.

An evaluator's timing comes from the compat layer's progress records
(compat/estimator_roles.py): ``{"evaluator_started": true, ...}`` when the
evaluator starts (without it, the task gets ``--grace_secs`` as any other),
``{"evaluation_started": true, "time": T}`` when an evaluation begins and
``{"evaluation": true, "global_step": N, "time": T}`` when it ends.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from ps_toolkit.cluster.config import CHIEF, EVALUATOR, PS, WORKER

# An evaluator's bound: this many times its longest measured evaluation, plus the margin (a checkpoint to
# notice and restore); with no evaluation measured yet, UNMEASURED_EVALUATION_SECS. Never under --grace_secs.
EVALUATION_BOUND_FACTOR = 3.0
EVALUATION_BOUND_MARGIN_SECS = 10.0
UNMEASURED_EVALUATION_SECS = 60.0


@dataclasses.dataclass(frozen=True)
class StopNote:
    """Why the launcher stopped a task: its name and the reason, as its log and the verdict say it."""

    task: str
    reason: str


def evaluation_times(progress: Sequence[dict]) -> list[float]:
    """The seconds each of an evaluator's evaluations took, from its start and end records."""
    times, started = [], None
    for record in progress:
        at = record.get("time")
        if not isinstance(at, int | float):
            continue
        if record.get("evaluation_started") is True:
            started = float(at)
        elif record.get("evaluation") is True and started is not None:
            times.append(max(0.0, float(at) - started))
            started = None
    return times


def evaluation_bound_secs(grace_secs: float, progress: Sequence[dict]) -> tuple[float, str]:
    """How long an evaluator gets to end after the chief's success, and how that was reckoned (for its stop note)."""
    times = evaluation_times(progress)
    if not any(record.get("evaluator_started") is True for record in progress):
        return grace_secs, f"--grace_secs={grace_secs:g}: it reported no evaluator start"
    if times:
        longest = max(times)
        bound = EVALUATION_BOUND_FACTOR * longest + EVALUATION_BOUND_MARGIN_SECS
        margin = EVALUATION_BOUND_MARGIN_SECS
        how = f"{EVALUATION_BOUND_FACTOR:g} x its longest evaluation ({longest:.1f} s) + {margin:g} s"
    else:
        bound, how = UNMEASURED_EVALUATION_SECS, "no evaluation of its measured yet"
    if grace_secs >= bound:
        return grace_secs, f"--grace_secs={grace_secs:g}"
    return bound, how


def last_evaluated_step(progress: Sequence[dict]) -> int | None:
    """The global step of the evaluator's last evaluation, or None before one."""
    steps = [r.get("global_step") for r in progress if r.get("evaluation") is True]
    steps = [s for s in steps if isinstance(s, int) and not isinstance(s, bool)]
    return steps[-1] if steps else None


def end_after_success(
    tasks: Sequence,
    grace_secs: float,
    ps_grace_secs: float,
    watch: Callable[[Callable[[], bool], float | None], None],
    stop: Callable[[list, str], None],
    alive: Callable[[object], bool],
) -> list[StopNote]:
    """Gives each non-ps task its bound to end by itself, then the ps tasks theirs; stops the rest, saying why.

    ``tasks``: the run's TaskRecords; ``watch(done, deadline)`` handles events until ``done()`` or the
    monotonic ``deadline`` (None: until ``done()``); ``stop(tasks, reason)`` stops tasks, logging the
    reason; ``alive(task)``.
    """
    notes: list[StopNote] = []
    start = time.monotonic()
    replicas = [t for t in tasks if t.plan.job in (CHIEF, WORKER)]
    watch(lambda: not any(alive(t) for t in replicas), start + grace_secs)
    late = [t for t in replicas if alive(t)]
    notes += _stop(
        late, f"still running {grace_secs:g} s after the chief's success (--grace_secs={grace_secs:g})", stop
    )
    for evaluator in [t for t in tasks if t.plan.job == EVALUATOR]:
        # Its bound is reckoned again as its evaluations are measured: the first may end after the chief.
        def past_bound(e=evaluator) -> bool:
            return time.monotonic() >= start + evaluation_bound_secs(grace_secs, e.output.progress)[0]

        watch(lambda e=evaluator: not alive(e) or past_bound(e), None)
        bound, how = evaluation_bound_secs(grace_secs, evaluator.output.progress)
        if alive(evaluator):
            reason = f"still evaluating {bound:.0f} s after the chief's success (its bound: {how})"
            notes += _stop([evaluator], reason, stop)
    others = [t for t in tasks if t.plan.job not in (PS, CHIEF, WORKER, EVALUATOR)]
    notes += _stop([t for t in others if alive(t)], "still running when the replicas had ended", stop)
    servers = [t for t in tasks if t.plan.job == PS]
    watch(lambda: not any(alive(t) for t in servers), time.monotonic() + ps_grace_secs)
    reason = f"still serving {ps_grace_secs:g} s after the other tasks had ended (--ps_grace_secs={ps_grace_secs:g})"
    return notes + _stop([t for t in servers if alive(t)], reason, stop)


def _stop(tasks: list, reason: str, stop: Callable[[list, str], None]) -> list[StopNote]:
    if not tasks:
        return []
    stop(tasks, reason)
    return [StopNote(t.plan.name, reason) for t in tasks]


def final_evaluation_note(tasks: Sequence) -> str:
    """Whether the evaluator evaluated the final checkpoint ('' without an evaluator, or without a final step)."""
    evaluators = [t for t in tasks if t.plan.job == EVALUATOR]
    steps = [t.output.global_step for t in tasks if t.plan.job in (CHIEF, WORKER) and t.output.global_step]
    if not evaluators or not steps:
        return ""
    final = max(steps)
    evaluated = last_evaluated_step(evaluators[0].output.progress)
    name = evaluators[0].plan.name
    if evaluated is not None and evaluated >= final:
        return f"{name} evaluated the final checkpoint (global step {evaluated})"
    last = f"its last evaluation was of global step {evaluated}" if evaluated is not None else "it reported none"
    return f"the final checkpoint (global step {final}) was NOT evaluated: {last}"


def ending_words(tasks: Sequence, notes: Sequence[StopNote]) -> str:
    """What a successful verdict adds about the end: the final evaluation, and each task stopped and why."""
    words = ""
    evaluation = final_evaluation_note(tasks)
    if evaluation:
        words += f"; {evaluation}"
    if notes:
        words += "; stopped by the launcher: " + ", ".join(f"{note.task} ({note.reason})" for note in notes)
    return words
