"""``tf.estimator.train_and_evaluate`` on a TF_CONFIG cluster: every role starts promptly and ends by itself.

``install()`` applies these to the loaded tensorflow-estimator package (its
per-role executor, ``tf_internals.training_executor_base()``, is what
train_and_evaluate runs on each task):

- ps: serves until every replica (chief and workers) has told it that it is
  done, then ends the process with status 0 (``ps_toolkit.task.roles.ps``'s done
  queues). The estimator's ps called ``server.join()`` and never returned, so
  no code after ``train_and_evaluate`` ran on a ps; none does here either.
  Its wait for replicas that are gone is bounded (300 s, the default of
  run_task.py's --ps_orphan_timeout_secs, then exit 3).
- chief (or the older "master") and workers: a worker waits ``WORKER_DELAY_SECS`` per task index, at
  most ``MAX_WORKER_DELAY_SECS``, before training (the estimator: 5 s per
  index, up to 60 s); their sessions come from
  ``compat.supervision.MonitoredTrainingSession`` (non-chiefs poll for the
  chief's model every second, 2 s stop grace, device filters), a
  ``SyncReplicasOptimizer``'s token queue is refilled when a replica ends so no
  replica stays blocked on it, and each tells the ps it is done.
- evaluator: waits and ends as ``compat.evaluator_watch`` describes (the
  chief marks the end of its training in the model dir for it).
- every task: a server whose port is taken fails in one line (exit 4, which the
  local launcher answers with fresh ports); TF_CONFIG and input_fn mistakes are
  one-line errors (``compat.estimator_inputs``).
"""

from __future__ import annotations

import logging
import os
import types

import tensorflow as tf

from ps_toolkit_compat import estimator_support

estimator_support.load()  # the package imports only once TensorFlow's dropped internals are supplied

from ps_toolkit.base.errors import PS_ORPHAN_TIMEOUT_SECS, ConfigError  # noqa: E402
from ps_toolkit.cluster.config import CHIEF, JOB_ALIASES, ClusterConfig  # noqa: E402
from ps_toolkit.cluster.preflight import check_host_resolves, check_port_free  # noqa: E402
from ps_toolkit.cluster.tf_config import read_tf_config  # noqa: E402
from ps_toolkit.task import startup  # noqa: E402
from ps_toolkit.task.roles.ps import serve_until_done, signal_done  # noqa: E402
from ps_toolkit_compat import (  # noqa: E402
    estimator_config_errors,
    estimator_inputs,
    estimator_work,
    progress_hook,
    supervision,
    task_context,
    tf_internals,
)
from ps_toolkit_compat.evaluator_watch import (  # noqa: E402
    CheckpointWatch,
    EvaluatorClock,
    mark_training_finished,
    mark_training_started,
    orphan_secs_from_env,
)

log = logging.getLogger(__name__)

WORKER_DELAY_SECS = 1
MAX_WORKER_DELAY_SECS = 5
_CLOCK = EvaluatorClock()
# Captured before a test (or a script) replaces the class: only a real server has done queues to serve.
_SERVER_CLASS = tf.distribute.Server


class _DelegatingModule(types.ModuleType):
    """A module's stand-in: the given members in place of ``base``'s own, and everything else of ``base``.

    A member stands in only while ``base`` still holds what it held when the
    stand-in was made: where a script or test patched ``base`` (a mock of
    ``training.MonitoredTrainingSession``), the estimator calls the patch, as
    it did without the compat layer.
    """

    def __init__(self, base: types.ModuleType, members: dict):
        super().__init__(base.__name__, base.__doc__)
        self._base = base
        self._stand_ins = {name: (getattr(base, name, None), member) for name, member in members.items()}

    def __getattr__(self, name: str):
        current = getattr(self._base, name)
        if name in self._stand_ins and current is self._stand_ins[name][0]:
            return self._stand_ins[name][1]
        return current


def _cluster_of(config) -> ClusterConfig | None:
    """This task's cluster as the RunConfig the user built holds it ("master" read as the chief); None where
    it has none, or holds a form TensorFlow accepts and the toolkit's ClusterConfig does not ('host0:0', a
    sparse job): such a task starts and ends as the estimator's own did."""
    try:
        spec = config.cluster_spec.as_dict() if config.cluster_spec else {}
        if not spec or config.task_type is None or config.task_id is None:
            return None
        if any(not isinstance(hosts, list | tuple) for hosts in spec.values()):
            return None
        jobs = {JOB_ALIASES.get(job, job): tuple(hosts) for job, hosts in spec.items()}
        task_type = JOB_ALIASES.get(config.task_type, config.task_type)
        return ClusterConfig(jobs=jobs, task_type=task_type, task_index=int(config.task_id), source="the RunConfig")
    except (ConfigError, TypeError, ValueError, AttributeError):
        return None


def _model_dir(estimator) -> str | None:
    """The estimator's model dir as a str path, or None when it is none (a test's stand-in estimator)."""
    model_dir = getattr(estimator, "model_dir", None)
    return os.fsdecode(model_dir) if isinstance(model_dir, str | bytes | os.PathLike) else None


def _chief_address(config) -> str | None:
    """The chief's (or master's) address from the TF_CONFIG the RunConfig read (an evaluator's RunConfig
    keeps no training cluster), else from the environment."""
    tf_config = getattr(config, estimator_inputs.TF_CONFIG_READ, None)
    if tf_config is None:
        tf_config = read_tf_config(error=estimator_inputs.EstimatorValueError) or {}
    cluster = tf_config.get("cluster") if isinstance(tf_config, dict) else None
    for job in (CHIEF, "master"):
        if isinstance(cluster, dict) and isinstance(cluster.get(job), list) and cluster[job]:
            return cluster[job][0]
    return None


class _WatchingEvalListener(tf_internals.continuous_eval_listener_class()):
    """Tells the watch which checkpoint was evaluated, and checks the chief after every pass."""

    def __init__(self, watch: CheckpointWatch, inner):
        self._watch, self._inner = watch, inner

    def before_eval(self):
        if self._watch.training_over():
            log.info("evaluator: the chief finished training and its last checkpoint is evaluated; exiting")
            return False
        proceed = self._inner.before_eval()
        if proceed and progress_hook.wanted():  # the launcher times evaluations to bound the final one's wait
            progress_hook.print_marker("evaluation_started")
        return proceed

    def after_eval(self, eval_result):
        if progress_hook.wanted() and isinstance(eval_result.metrics, dict):
            progress_hook.print_evaluation(eval_result.metrics)
        if isinstance(eval_result.checkpoint_path, str | bytes) and eval_result.checkpoint_path:
            self._watch.evaluated(os.fsdecode(eval_result.checkpoint_path))
        self._watch.check_chief()
        return self._inner.after_eval(eval_result)


class TrainingExecutor(tf_internals.training_executor_base()):
    """The estimator's per-role executor with the compat layer's start and end."""

    _server = None

    def start_std_server(self, config):
        cluster = _cluster_of(config)
        if cluster is not None:
            startup.begin(cluster, checks=False)  # the start-up of every entry point; its port kept private
            check_host_resolves(cluster)
            check_port_free(cluster)
        task_context.set_task(config.task_type, config.task_id)
        self._server = super().start_std_server(config)
        return self._server

    def run_ps(self):
        config = self.estimator.config
        server = self.start_std_server(config)
        cluster = _cluster_of(config)
        if cluster is None or not isinstance(server, _SERVER_CLASS):
            # Nothing to count the replicas by (or a server that is not TensorFlow's): the estimator's join().
            server.join()
            return
        order = serve_until_done(cluster, server, orphan_timeout_secs=PS_ORPHAN_TIMEOUT_SECS)
        log.info("%s: every replica is done (%s); exiting", cluster.device, order)
        raise SystemExit(0)

    def run_chief(self):
        self._mark(mark_training_started)
        result = super().run_chief()
        self._mark(mark_training_finished)
        self._signal_done()
        return result

    def run_master(self):
        """The TF 1.0-era "master" task: trains and evaluates in one process, as the chief does with an evaluator."""
        self._mark(mark_training_started)
        result = super().run_master()
        self._mark(mark_training_finished)
        self._signal_done()
        return result

    def _mark(self, mark) -> None:
        """The evaluator's start/finish marker in the model dir: a help, never a new way to fail (a model dir
        that is not a path, or not there, costs the evaluator only its early end)."""
        model_dir = _model_dir(self.estimator)
        if model_dir is None:
            return
        try:
            mark(model_dir)
        except OSError as err:
            log.warning("cannot mark the end of training for the evaluator in %s: %s", model_dir, err)

    def run_worker(self):
        result = super().run_worker()
        self._signal_done()
        return result

    def _signal_done(self):
        cluster = _cluster_of(self.estimator.config)
        if cluster is not None and isinstance(self._server, _SERVER_CLASS):
            signal_done(cluster, self._server.target)

    def run_evaluator(self):
        if progress_hook.wanted():  # the launcher then waits for this evaluator's final evaluation
            progress_hook.print_marker("evaluator_started")
        model_dir = _model_dir(self.estimator)
        if model_dir is None:
            return super().run_evaluator()
        watch = CheckpointWatch(
            model_dir,
            self.train_spec.max_steps,
            _chief_address(self.estimator.config),
            orphan_secs_from_env(),
        )
        self.continuous_eval_listener = _WatchingEvalListener(watch, self.continuous_eval_listener)
        _CLOCK.watch = watch
        try:
            return super().run_evaluator()
        finally:
            _CLOCK.watch = None


def monitored_training_session(**kwargs):
    """The estimator's MonitoredTrainingSession: compat.supervision's, with sync token release.

    A model_fn's ``tf.compat.v1.train.SyncReplicasOptimizer`` (TensorFlow's own
    class, not the compat one) gets its release op here, while the graph can
    still grow.
    """
    hooks = [*(kwargs.get("hooks") or []), *(kwargs.get("chief_only_hooks") or [])]
    for optimizer in tf_internals.sync_optimizers_of_hooks(hooks):
        supervision.add_release_op(optimizer)
    return supervision.MonitoredTrainingSession(**kwargs)


def install() -> None:
    """Applies the role fixes to the loaded estimator package. Idempotent."""
    if tf_internals.installed_training_executor() is TrainingExecutor:
        return
    tf_internals.install_training_executor(TrainingExecutor, WORKER_DELAY_SECS, MAX_WORKER_DELAY_SECS, _CLOCK)
    tf_internals.set_estimator_train_module(
        _DelegatingModule(
            tf_internals.estimator_train_module(), {"MonitoredTrainingSession": monitored_training_session}
        )
    )
    estimator_inputs.install()
    estimator_config_errors.install()
    estimator_work.install()
