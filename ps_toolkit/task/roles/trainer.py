"""Between-graph training of a model_fn, async or with SyncReplicasOptimizer, under a MonitoredSession.

Chief and workers run the same loop; they differ only in the session creator
chosen once (``LiveStateChiefSessionCreator`` vs ``FastWorkerSessionCreator``)
and in the chief-only hooks (checkpoints, summaries, step counter). The graph
comes from ``replica_graph.build``.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable

import tensorflow as tf

from ps_toolkit import dynamic_embedding
from ps_toolkit.base import session_close
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.network import step_guard
from ps_toolkit.task import checkpoints, table_checkpoints
from ps_toolkit.task.save_schedule import SavePacer, StepAfterRunSaverHook, delta_hook
from ps_toolkit.task.sessions import FastWorkerSessionCreator, LiveStateChiefSessionCreator
from ps_toolkit.task.watchdog import ProgressWatchdog
from ps_toolkit.training import folder_input, multi_step, replica_graph, stop_request
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.evaluation import (
    FinalEvaluationHook,
    FinalEvaluationJoin,
    FinalEvaluationStart,
    write_summary,
)
from ps_toolkit.training.model_api import ModelDefinition
from ps_toolkit.training.multi_step import StopAtLastStepHook
from ps_toolkit.training.progress_report import ProgressHook
from ps_toolkit.training.replica_graph import TrainGraph

log = logging.getLogger(__name__)
# Progress lines a replica prints over a whole run at least (besides one a second): the chart's points.
PROGRESS_LINES_PER_RUN = 50


def _session_creator(cluster, config, graph, target, session_config, bound_session_close: bool):
    if cluster.is_chief:
        creator = LiveStateChiefSessionCreator(
            graph.scaffold, target, session_config, config.checkpoint_dir, config.readiness_poll_secs
        )
    else:
        creator = FastWorkerSessionCreator(graph.scaffold, target, session_config, config.readiness_poll_secs)
    if not bound_session_close:
        return creator
    return _BoundedCloseCreator(creator, what=f"{cluster.device}'s training session")


class _BoundedCloseCreator(tf.compat.v1.train.SessionCreator):
    """``creator``'s sessions, each closing within ``session_close.CLOSE_BOUND_SECS``: for a task that
    ends with os._exit soon after, where a close that waits on a slow peer would hold the job's end.
    Not for a process that exits normally: a close left running in TensorFlow aborts its exit."""

    def __init__(self, creator: tf.compat.v1.train.SessionCreator, what: str):
        self._creator, self._what = creator, what

    def create_session(self):
        return session_close.bound_close(self._creator.create_session(), what=self._what)


def _save_pacer(cluster: ClusterConfig, config: TrainConfig, graph: TrainGraph) -> SavePacer | None:
    """The pacer of an async chief's in-graph loop with saves by steps; else None (every run is one step or
    one sync step per replica step, so a save is at most one run late anyway)."""
    by_steps = config.checkpoint_dir and config.save_checkpoint_steps and not config.save_checkpoint_secs
    if not (cluster.is_chief and by_steps and graph.multi_step and not config.sync_replicas):
        return None
    return SavePacer(config.save_checkpoint_steps)


def _chief_saving_hooks(config: TrainConfig, graph: TrainGraph, listeners=(), cluster: ClusterConfig = None) -> list:
    if not config.checkpoint_dir:
        return []
    step_after_run = graph.multi_step.global_step if graph.multi_step is not None else None
    deltas = delta_hook(cluster, config, graph.scaffold.saver, step_after_run) if cluster is not None else None
    listeners = [*listeners, *([deltas.base_listener()] if deltas else [])]
    steps = None if config.save_checkpoint_secs else config.save_checkpoint_steps
    saver_class = tf.compat.v1.train.CheckpointSaverHook
    if graph.multi_step is not None:
        saver_class = functools.partial(StepAfterRunSaverHook, graph.multi_step.global_step)
    saver_hook = saver_class(
        config.checkpoint_dir,
        save_steps=steps,
        save_secs=config.save_checkpoint_secs,
        scaffold=graph.scaffold,
        listeners=list(listeners),
        # No graph.pbtxt and no .meta file beside each checkpoint: the graph holds the input
        # pipeline's data as constants, and writing it as text before the first step (and again
        # at every save) would be the chief's largest start-up cost. TensorBoard reads the graph
        # from the events file, which still gets it; --export_dir writes a servable graph.
        save_graph_def=False,
    )
    # TF's hook assumes a million steps per session.run unless told otherwise, so
    # it reads the global step again after EVERY run: one more round trip to the ps
    # per step, 36% of the sync chief's busy time in a py-spy profile. With the
    # true count it reads only when a save may be due (a save is at most one run late).
    if graph.multi_step is None:
        from ps_toolkit.base.tf_internals import set_saver_steps_per_run

        set_saver_steps_per_run(saver_hook, config.steps_per_run)
    return [
        saver_hook,
        *([deltas] if deltas else []),
        tf.compat.v1.train.SummarySaverHook(
            save_steps=config.save_summaries_steps, output_dir=config.checkpoint_dir, scaffold=graph.scaffold
        ),
        tf.compat.v1.train.StepCounterHook(every_n_steps=config.save_summaries_steps, output_dir=config.checkpoint_dir),
    ]


class _StopOnRequestHook(tf.compat.v1.train.SessionRunHook):
    """Ends the loop after the run in which a stop was requested (stop_request: SIGTERM / Ctrl-C)."""

    def after_run(self, run_context, run_values):
        if stop_request.requested():
            run_context.request_stop()


def _step_dependency(cluster: ClusterConfig, config: TrainConfig) -> str:
    """What a training step waits for, for the watchdog's message."""
    if config.sync_replicas:
        return (
            "a token from the chief's aggregation, which needs gradients from "
            f"{config.aggregate_count(cluster)} of {cluster.num_replicas} replicas for each sync step"
        )
    return "global-step updates through the ps tasks"


def _steps_feed(graph: TrainGraph, config: TrainConfig, cluster: ClusterConfig, progress: ProgressHook, pacer=None):
    """How many steps the next run takes: one in the first run, fewer near the end (async).

    The first run takes one step so that the replica's first step is seen
    (its progress line, the watchdog's beat) as soon as it is done, not a
    whole in-graph loop later. Near the end an async replica takes its share
    of what is left, so the replicas stop near train_steps; a sync loop stops
    by itself at the last step, since every replica takes every step.
    """
    if graph.multi_step is None:
        return None
    if not progress.local_steps:
        return {graph.multi_step.num_steps: 1}
    if config.sync_replicas:
        return None
    count = multi_step.steps_for_next_run(
        progress.last_global_step or 0, config.last_step, cluster.num_replicas, config.steps_per_run
    )
    if pacer is not None:  # the async chief: its run ends near the next save by steps
        count = pacer.steps_for_next_run(progress.last_global_step or 0, progress.local_steps, count)
    return {graph.multi_step.num_steps: count}


def train(
    cluster: ClusterConfig,
    target: str | Callable[[], str],
    config: TrainConfig,
    definition: ModelDefinition,
    session_config=None,
    on_progress=None,
    final_hooks=(),
    bound_session_close: bool = False,
) -> dict:
    """Trains this replica until the global step reaches ``config.train_steps`` (0: until a stop request).

    ``target`` is the session target, or a function that starts this task's
    server and returns its target: it is called once the training graph is
    built, so a model whose TRAIN mode breaks the contract (ConfigError) is
    reported before anyone can wait for this task, without building the graph
    twice. The final evaluation's graph is built after the first run
    (``FinalEvaluationHook``): an EVAL mode that breaks it ends the task then.
    ``final_hooks`` come after every other hook: their ``end`` runs once the
    final checkpoint and evaluation are done, before the session closes.
    ``bound_session_close``: the sessions' closes wait 0.25 s at most, for a
    task process that ends with os._exit (run_task.py's); never in a process
    that exits normally.

    Returns the task's result record: job, task, global_step, local_steps,
    first_loss, final_loss, eval (every metric of the final evaluation, when
    the model has an eval_input_fn), test_accuracy (its ``accuracy``), seconds.
    """
    config.validate(cluster)
    started = time.monotonic()
    with tf.Graph().as_default():
        graph = replica_graph.build(cluster, config, definition)
        if cluster.is_chief and config.checkpoint_dir:  # a checkpoint of another model: exit 2 now, said in one line
            checkpoints.check_model_matches_checkpoint(
                config.checkpoint_dir,
                tf.compat.v1.global_variables(),
                dynamic_embedding.tables_of_graph(),
                table_checkpoints.table_specs(),
            )
        if callable(target):
            target = target()
        progress = _progress_hook(cluster, config, graph, on_progress)
        maintenance = next((h for h in graph.hooks if isinstance(h, dynamic_embedding.TableMaintenanceHook)), None)
        if maintenance is not None:
            progress.add_fields(maintenance.progress_fields)
        evaluation = _final_evaluation(cluster, config, definition, graph, target, session_config, bound_session_close)
        pacer = _save_pacer(cluster, config, graph)
        hooks = [*_hooks(cluster, config, graph, progress, evaluation, pacer), *final_hooks]
        creator = _session_creator(cluster, config, graph, target, session_config, bound_session_close)
        _run_session(cluster, target, creator, config, graph, hooks, progress, session_config, evaluation, pacer)
        if progress.local_steps:
            progress.emit()
        metrics = evaluation.metrics if evaluation else None
        if cluster.is_chief and metrics and config.checkpoint_dir:
            _write_eval_summary(config.checkpoint_dir, progress.last_global_step, metrics)
    tables = {"tables": maintenance.result()} if maintenance is not None else {}
    return {
        "job": cluster.task_type,
        "task": cluster.task_index,
        "global_step": progress.last_global_step,
        "local_steps": progress.local_steps,
        "first_loss": progress.first_loss,
        "final_loss": progress.last_loss,
        "eval": metrics,
        "test_accuracy": (metrics or {}).get("accuracy"),
        "seconds": round(time.monotonic() - started, 3),
        **tables,
    }


def _progress_hook(cluster: ClusterConfig, config: TrainConfig, graph: TrainGraph, on_progress) -> ProgressHook:
    """The hook that prints this replica's progress lines and tells ``on_progress`` each global step."""
    progress = ProgressHook(
        loss=graph.loss,
        global_step=graph.global_step,
        job=cluster.task_type,
        task=cluster.task_index,
        every_secs=config.progress_every_secs,
        every_global_steps=max(1, config.interval_steps // PROGRESS_LINES_PER_RUN),
        steps_in_run=graph.multi_step.steps_done if graph.multi_step else None,
        step_after_run=graph.multi_step.global_step if graph.multi_step else None,
    )
    if on_progress is not None:
        progress.add_listener(on_progress)
    return progress


def _final_evaluation(
    cluster: ClusterConfig,
    config: TrainConfig,
    definition: ModelDefinition,
    graph: TrainGraph,
    target: str,
    session_config,
    bound_session_close: bool,
) -> FinalEvaluationHook | None:
    """The hook that evaluates the model at the end (``config.eval_steps`` batches at most), when it has an
    eval_input_fn and this replica evaluates (``config.final_evaluation``); else None."""
    if definition.eval_input_fn is None or (config.final_evaluation == "chief" and not cluster.is_chief):
        return None
    return FinalEvaluationHook(
        definition,
        target,
        device=cluster.device,
        partitioner=graph.partitioner,
        session_config=session_config,
        max_batches=config.eval_steps,
        bound_secs=config.watchdog_secs or None,
        bound_close=bound_session_close,
    )


def _hooks(
    cluster: ClusterConfig,
    config: TrainConfig,
    graph: TrainGraph,
    progress: ProgressHook,
    evaluation: FinalEvaluationHook | None,
    pacer: SavePacer | None = None,
) -> list:
    """Every hook of the session: the graph's, the stops, the NaN check, progress, evaluation; on the chief,
    the step guard first and the checkpoint and summary savers."""
    # The folder inputs' hooks first: a session reads their saved positions before the input starts.
    positions = [item.hook() for item in tf.compat.v1.get_collection(folder_input.FOLDER_INPUTS)]
    hooks = [
        *positions,
        *graph.hooks,
        tf.compat.v1.train.StopAtStepHook(last_step=config.last_step),
        *([StopAtLastStepHook(graph.multi_step.global_step, config.last_step)] if graph.multi_step else []),
        _StopOnRequestHook(),
        tf.compat.v1.train.NanTensorHook(graph.loss),
        progress,
        *([evaluation] if evaluation else []),
    ]
    if cluster.is_chief:
        guard = step_guard.chief_hook(cluster, config, graph)
        listeners = [guard.saver_listener(), *([pacer] if pacer else []), *(hook.save_listener() for hook in positions)]
        # The positions are read before the saver's first save (at session creation) can write them back.
        rest = [hook for hook in hooks if hook not in positions]
        hooks = [*positions, guard, *_chief_saving_hooks(config, graph, listeners, cluster), *rest]
    if evaluation is None:
        return hooks
    # The final evaluation starts first at the end and runs while the final checkpoint is written;
    # the last hook waits for it.
    return [FinalEvaluationStart(evaluation), *hooks, FinalEvaluationJoin(evaluation)]


def _run_session(
    cluster, target, creator, config, graph: TrainGraph, hooks, progress, session_config, evaluation, pacer=None
):
    """The MonitoredSession loop, under the watchdog, until a hook asks to stop; the final ``evaluation``'s
    batches count as progress, and a stall in it is named as its own."""
    waiting_for = "the chief to initialize or restore the model" if not cluster.is_chief else "the ps tasks"
    with ProgressWatchdog(
        cluster, timeout_secs=config.watchdog_secs, waiting_for=waiting_for, sync_replicas=config.sync_replicas
    ) as watchdog:
        progress.add_listener(watchdog.beat)
        if evaluation is not None and config.train_steps:
            # Halfway through, the evaluation's session is opened and run once, so its first run's
            # cost is not paid after the last step (not at the start: it would slow the first steps).
            halfway = config.train_steps // 2
            progress.add_listener(lambda global_step: evaluation.warm_up() if global_step >= halfway else None)
        if evaluation is not None:
            evaluation.on_warm_up_wait = lambda: watchdog.expect(
                "the final evaluation's warm-up (its session, opened halfway through training, in its first batch)"
            )
            evaluation.on_start = lambda: watchdog.expect("the final evaluation's next batch (its eval_input_fn)")
            evaluation.on_batch = watchdog.working
        if cluster.is_chief and config.checkpoint_dir:
            checkpoints.check_ps_share_checkpoint_dir(cluster, target, config.checkpoint_dir, session_config)
        try:
            with tf.compat.v1.train.MonitoredSession(
                session_creator=creator, hooks=hooks, stop_grace_period_secs=config.stop_grace_secs
            ) as session:
                watchdog.expect(_step_dependency(cluster, config))
                while not session.should_stop():
                    try:
                        _run_step(session, graph, config, cluster, progress, pacer)
                    except tf.errors.OutOfRangeError as err:
                        # MonitoredSession would end the loop as if training were done: it is not,
                        # unless a stop was asked for and the input ended for it.
                        if _END_OF_INPUT not in err.message:
                            raise
                        failures = [i.failure for i in tf.compat.v1.get_collection(folder_input.FOLDER_INPUTS)]
                        if any(failures):
                            raise ConfigError(f"{cluster.device}: {next(f for f in failures if f)}") from None
                        if stop_request.requested():
                            break
                        raise _input_ended(cluster, config, progress) from None
        except tf.compat.v1.train.NanLossDuringTrainingError:
            rate = f" (was {graph.learning_rate})" if graph.learning_rate is not None else ""
            raise ConfigError(
                f"loss became NaN near global step {progress.last_global_step}; lower --learning_rate{rate}"
            ) from None


# What a dataset iterator's get-next says when the input has no more elements.
_END_OF_INPUT = "End of sequence"


def _input_ended(cluster: ClusterConfig, config: TrainConfig, progress) -> ConfigError:
    """The training input ran out before ``--train_steps``: a run that trained less than asked is no success."""
    if not config.train_steps:
        return ConfigError(
            f"{cluster.device}: the input_fn's dataset ended after {progress.local_steps} steps of this replica, "
            "in a job with no step limit (--train_steps=0); give an input that never ends (dataset.repeat(), "
            "ps_toolkit.follow_folder) or a --train_steps"
        )
    return ConfigError(
        f"{cluster.device}: the input_fn's dataset ended after {progress.local_steps} steps of this replica, "
        f"before --train_steps={config.train_steps}; repeat it (dataset.repeat()) or lower --train_steps"
    )


# A step's error lists every status its parts raised, the first one giving its type: these beside a
# CANCELLED are the preemption errors MonitoredSession recovers from (a peer restarted or went away).
_PEER_RESTARTED = ("ABORTED: From /job:", "UNAVAILABLE: From /job:", "was probably restarted")


def _run_step(session, graph: TrainGraph, config: TrainConfig, cluster: ClusterConfig, progress, pacer=None) -> None:
    """One ``session.run`` of the training op; a step cancelled because a peer restarted is not an error.

    When a ps restarts mid-step, TensorFlow may report the step as CANCELLED
    (this replica's half of a transfer was cancelled) with the ps's ABORTED or
    UNAVAILABLE beside it, whichever part failed first. MonitoredSession
    re-creates its session only on ABORTED and UNAVAILABLE: the next run meets
    the restarted ps's ABORTED and does.
    """
    try:
        session.run(graph.train_op, feed_dict=_steps_feed(graph, config, cluster, progress, pacer))
    except tf.errors.CancelledError as err:
        if not any(sign in err.message for sign in _PEER_RESTARTED):
            raise
        log.info("%s: a step was cancelled by a peer's restart; the session is re-created", cluster.device)


def _write_eval_summary(checkpoint_dir: str, step: int, metrics: dict) -> None:
    """The final evaluation's metrics as summaries in ``<checkpoint_dir>/eval``, where the evaluator writes."""
    writer = tf.compat.v1.summary.FileWriter(os.path.join(checkpoint_dir, "eval"))
    write_summary(writer, step, metrics)
    writer.close()
