"""tf.estimator's refusals of a call in the wrong role or configuration, as one line naming the task and the call.

The estimator checks the role a call runs in and raises a ValueError with a
traceback: ``Estimator.train()`` on a ps or the evaluator ("Train has been
called wrong configuration. Please use tf.estimator.train_and_evaluate ...",
followed by a dump of the whole RunConfig), ``train_and_evaluate`` with a
task type it has no role for, a second evaluator, saving listeners without a
checkpoint saver. Under the compat layer each is an ``EstimatorValueError``
(compat/estimator_inputs.py): still a ValueError for ``except ValueError``,
and a ConfigError, so scripts/run_legacy.py prints one line and exits 2:

    ps:0: tf.estimator.Estimator.train(): Train has been called wrong configuration. Please use ...

Only these messages are reworded (``CONFIGURATION_MESSAGES``); every other
ValueError goes up unchanged, with its traceback.
"""

from __future__ import annotations

import contextlib
import functools
import re

from ps_toolkit_compat import estimator_support
from ps_toolkit_compat.estimator_inputs import EstimatorValueError

# The starts of the estimator's configuration ValueErrors (tensorflow_estimator 2.15: estimator.py, training.py).
CONFIGURATION_MESSAGES = (
    "Train has been called wrong configuration",
    "For distributed training, there can only be one `evaluator` task",
    "`estimator.config` must have task_type set",
    "`task.type` in TF_CONFIG cannot be `local`",
    "There should be a CheckpointSaverHook to use saving_listeners",
)
# "Task type foo is not supported. Supported task types are [...]"
_UNSUPPORTED_TASK = re.compile(r"^Task type \S+ is not supported\.")
# The RunConfig dump some of them end with: many lines of no use in a one-line error.
_CONFIG_DUMP = re.compile(r"\s*Current configuration:.*", re.DOTALL)
_MARK = "_ps_toolkit_config_errors"


def is_configuration_error(err: BaseException) -> bool:
    """Whether ``err`` is one of the estimator's own configuration ValueErrors (not a subclass, not another's)."""
    if type(err) is not ValueError:
        return False
    text = str(err).strip()
    return text.startswith(CONFIGURATION_MESSAGES) or _UNSUPPORTED_TASK.match(text) is not None


def task_name(config) -> str:
    """'ps:0' for a RunConfig of a cluster's task; 'the local task' without a cluster role."""
    task_type = getattr(config, "task_type", None)
    if not task_type or (task_type == "worker" and not getattr(config, "cluster_spec", None)):
        return "the local task"
    return f"{task_type}:{getattr(config, 'task_id', 0) or 0}"


def one_line(err: ValueError, task: str, call: str) -> EstimatorValueError:
    """The configuration error ``err`` of ``call`` on ``task`` as one line, without the RunConfig dump."""
    text = _CONFIG_DUMP.sub("", str(err).strip())
    text = " ".join(text.split())
    return EstimatorValueError(f"{task}: {call}: {text}")


@contextlib.contextmanager
def reworded(config, call: str):
    """Within it, the estimator's configuration ValueErrors become one-line EstimatorValueErrors."""
    try:
        yield
    except ValueError as err:
        if not is_configuration_error(err):
            raise
        raise one_line(err, task_name(config), call) from None


def _wrap_train(original):
    @functools.wraps(original)
    def train(self, *args, **kwargs):
        with reworded(self.config, "tf.estimator.Estimator.train()"):
            return original(self, *args, **kwargs)

    return train


def _wrap_train_and_evaluate(original):
    @functools.wraps(original)
    def train_and_evaluate(estimator, *args, **kwargs):
        with reworded(getattr(estimator, "config", None), "tf.estimator.train_and_evaluate()"):
            return original(estimator, *args, **kwargs)

    train_and_evaluate._ps_toolkit_config_errors = True
    return train_and_evaluate


def install() -> None:
    """Wraps the loaded estimator's Estimator.train and train_and_evaluate (tf.estimator's, v1 and v2). Idempotent."""
    api = estimator_support.load()
    estimator_class = api.v1.Estimator
    if not getattr(estimator_class, _MARK, False):
        estimator_class.train = _wrap_train(estimator_class.train)
        setattr(estimator_class, _MARK, True)
    for namespace in (api.v1, api.v2):
        current = getattr(namespace, "train_and_evaluate", None)
        if current is not None and not getattr(current, _MARK, False):
            namespace.train_and_evaluate = _wrap_train_and_evaluate(current)
