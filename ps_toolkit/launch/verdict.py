"""A run's verdict: success only when the chief finished with 0, no task failed for good, and the job did work.

A chief that exits 0 is not enough: an old script whose chief branch did
nothing (a role it did not know, a server started and left) returns 0 at once
while its workers fail or never train. ``confirm`` turns such a run into a
failure that names the task and its last lines. The launcher's ClusterSupervisor and
``LocalCluster.verdict`` both use it, so the rule is one rule.

Evidence that training happened, from any training task's output
(``TaskOutput``): the toolkit's result line, a global step above 0 (its
progress records, or TensorFlow's and the estimator's log lines: "Saving
checkpoints for N", "loss = ..., step = N"), or a result the script printed
itself (an accuracy, a loss, its local steps). Evidence of work without
training (``work_evidence``): a restored model exported, evaluated or
predicted, a throughput line or a ``Step ... loss`` table, a line matching
``--success_pattern`` (ps_toolkit.launch.work_evidence). A chief that did
nothing fails, with the likely cause where the script's code shows one
(ps_toolkit.launch.role_hint).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

# An exit status for a run whose chief ended 0 without training: a failure, not bad input.
EXIT_NOTHING_TRAINED = 1


@dataclasses.dataclass(frozen=True)
class TaskEnd:
    """How one task ended, as the verdict needs it: its state and, if it failed, the failure's description."""

    name: str
    state: str  # finished, failed, stopped, running, ...
    failure: str | None = None  # "worker:1 (localhost:5) exited with status 2 (...); last lines of ...: ..."
    exit_code: int = 0


def training_evidence(outputs: Mapping) -> str | None:
    """What shows that training happened, e.g. 'global step 1000 (chief:0)', or None."""
    for name, output in outputs.items():
        if output.result is not None:
            return f"the result line of {name}"
    steps = [(output.global_step, name) for name, output in outputs.items() if output.global_step]
    if steps:
        step, name = max(steps)
        return f"global step {step} ({name})"
    for name, output in outputs.items():
        if output.printed_accuracy is not None or output.printed_loss is not None or output.printed_local_step:
            return f"the result {name} printed"
    return None


def work_evidence(outputs: Mapping) -> str | None:
    """What shows that the job did its work without training ('restored ... and exported ... (chief:0)'), or None."""
    for name, output in outputs.items():
        work = getattr(output, "work", None)
        said = work.evidence() if work is not None else None
        if said:
            return f"{said} ({name})"
    return None


def confirm(
    message: str,
    ends: Sequence[TaskEnd],
    outputs: Mapping,
    chief: str,
    chief_tail: Sequence[str],
    *,
    output_lost: bool = False,
    hint: str = "",
) -> tuple[bool, str, int]:
    """The final (succeeded, message, exit code) of a run that the chief's status 0 decided as a success.

    ``message`` is that success's message; ``ends`` every task's end after the wind-down;
    ``outputs`` the training tasks' TaskOutputs (the evaluator's metrics count too). ``output_lost``:
    the log folder could not hold the tasks' output, so its lack of evidence proves nothing (the
    message says so instead of failing the run). ``hint``: the likely cause of a chief that did nothing
    (ps_toolkit.launch.role_hint), said when the run fails for it.
    """
    failed = [end for end in ends if end.state == "failed" and end.failure]
    if failed:
        first = failed[0]
        return False, f"{message}, but {first.failure}", first.exit_code or 1
    if training_evidence(outputs) is not None:
        return True, message, 0
    work = work_evidence(outputs)
    if work is not None:
        return True, f"{message} (no training step the launcher could count; its work: {work})", 0
    if output_lost:
        return True, f"{message} (whether it trained is unknown: its output did not fit in the log folder)", 0
    tail = "\n".join(f"    {line}" for line in chief_tail)
    cause = f"; {hint}" if hint else ""
    return (
        False,
        f"{message}, but nothing trained: no task reported a global step above 0, a result line, "
        f"or an accuracy, loss or step count of its own, and none restored a model and exported, evaluated or "
        f"predicted, printed a throughput line or a Step ... loss table, or matched --success_pattern{cause}; "
        f"last lines of {chief}:\n{tail}",
        EXIT_NOTHING_TRAINED,
    )
