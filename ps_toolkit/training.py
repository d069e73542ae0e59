"""Between-graph training, async or with SyncReplicasOptimizer, under a MonitoredSession.

Chief and workers run the same loop; they differ only in the session creator
chosen once (``LiveStateChiefSessionCreator`` vs ``FastWorkerSessionCreator``)
and in the chief-only hooks (checkpoints, summaries, step counter, releasing
sync replicas at the end).
"""

from __future__ import annotations

import dataclasses
import logging
import time

import tensorflow as tf

from ps_toolkit import checkpoints, fast_path, layer_placement, packed_transfer, placement, sync_loop
from ps_toolkit.cluster import ClusterConfig
from ps_toolkit.data import DataSplits, make_train_input
from ps_toolkit.errors import ConfigError
from ps_toolkit.hooks import (
    FinalEvaluationHook,
    ProgressHook,
    StopAtLastStepHook,
    SyncReleaseHook,
    SyncReplicasHook,
)
from ps_toolkit.models import build_model
from ps_toolkit.replica_tokens import PerReplicaSyncOptimizer
from ps_toolkit.sessions import FastWorkerSessionCreator, LiveStateChiefSessionCreator
from ps_toolkit.train_config import TrainConfig
from ps_toolkit.watchdog import ProgressWatchdog

log = logging.getLogger(__name__)
# Progress lines a replica prints over a whole run at least (besides one a second): the chart's points.
PROGRESS_LINES_PER_RUN = 50


@dataclasses.dataclass
class _Graph:
    """The tensors and hooks one replica's training graph provides."""

    global_step: tf.Tensor
    train_op: tf.Operation
    loss: tf.Tensor
    hooks: list
    evaluation: FinalEvaluationHook
    scaffold: tf.compat.v1.train.Scaffold
    multi_step: fast_path.MultiStep | None = None  # when config.steps_per_run > 1


def build_graph(cluster: ClusterConfig, config: TrainConfig, data: DataSplits) -> _Graph:
    """Builds one replica's graph in the default graph: input, model, optimizer, hooks."""
    device_fn = placement.device_setter(cluster, config.placement, seed=config.seed)
    with tf.compat.v1.device(device_fn):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        next_batch, input_hook = make_train_input(
            data.train_images,
            data.train_labels,
            batch_size=config.batch_size,
            replica_index=cluster.replica_index,
            num_replicas=cluster.num_replicas,
            seed=config.seed,
        )
        partitioner = placement.variable_partitioner(cluster) if config.partition_variables else None
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(config.effective_learning_rate)
        hooks = [input_hook]
        # The evaluation model creates the variables, so that the training model can read them
        # packed (packed_transfer) or inside a while loop, where variables cannot be created.
        evaluation = _evaluation_hook(config, data, partitioner)
        variables = tf.compat.v1.trainable_variables()
        runs_near = layer_placement.near_rule(
            config.compute_near_weights,
            config.batch_size,
            worker_has_gpu=bool(tf.config.list_physical_devices("GPU")),
            partitioned=partitioner is not None,
            # A layer's matrix lives on one ps, which would do every replica's arithmetic for it.
            num_replicas=cluster.num_replicas,
        )

        def loss_fn(custom_getter=None):
            # The batch is taken here, where the loss is built: inside the in-graph
            # loop's body, so that every step of a run trains on a batch of its own.
            images, labels = next_batch()
            with tf.compat.v1.variable_scope("model", reuse=True, custom_getter=custom_getter):
                return _loss(labels, build_model(config.model, images, partitioner, runs_near))

        if config.steps_per_run > 1 and config.sync_replicas:
            multi_step = _sync_multi_step_run(cluster, config, global_step, optimizer, hooks, loss_fn, variables)
            train_op, loss = multi_step.global_step.op, multi_step.loss
        elif config.steps_per_run > 1:
            multi_step = _multi_step_run(config, global_step, optimizer, loss_fn, variables)
            train_op, loss = multi_step.global_step.op, multi_step.loss
        else:
            multi_step = None
            train_op, loss = _single_step(cluster, config, global_step, optimizer, hooks, loss_fn, variables)
        tf.compat.v1.summary.scalar("loss", loss)
    if cluster.is_chief:
        placement.log_placement_report(placement.placement_report(num_ps=cluster.num_ps), log)
    scaffold = tf.compat.v1.train.Scaffold(saver=tf.compat.v1.train.Saver(max_to_keep=5, sharded=True))
    return _Graph(global_step, train_op, loss, hooks, evaluation, scaffold, multi_step)


def _loss_and_gradients(config, optimizer, loss_fn, variables) -> tuple:
    """The training loss and its (gradient, variable) pairs, moved packed unless every layer runs on the ps."""
    if config.packed_transfers:
        return packed_transfer.loss_and_gradients(loss_fn, variables)
    loss = loss_fn()
    # A layer run beside its weights keeps its backward pass there too.
    colocate = config.compute_near_weights != "none"
    return loss, optimizer.compute_gradients(loss, colocate_gradients_with_ops=colocate)


def _single_step(cluster, config, global_step, optimizer, hooks, loss_fn, variables) -> tuple:
    """One step per session.run, async or sync: (train op, loss); adds the sync hooks to ``hooks``."""
    loss, grads_and_vars = _loss_and_gradients(config, optimizer, loss_fn, variables)
    if config.sync_replicas:
        optimizer = _sync_optimizer(cluster, config, optimizer)
    train_op = optimizer.apply_gradients(grads_and_vars, global_step=global_step)
    if config.sync_replicas:
        _add_sync_hooks(cluster, optimizer, hooks)
    return train_op, loss


def _sync_optimizer(cluster, config, optimizer):
    return PerReplicaSyncOptimizer(
        optimizer,
        replicas_to_aggregate=config.aggregate_count(cluster),
        total_num_replicas=cluster.num_replicas,
        replica_index=cluster.replica_index,
        last_step=config.train_steps,
    )


def _add_sync_hooks(cluster, sync_optimizer, hooks) -> None:
    # Every replica needs the hook: it runs the local-step init and,
    # on the chief, the token init and the aggregating queue runner.
    hooks.append(SyncReplicasHook(sync_optimizer, cluster.is_chief))
    # Its end() runs before the final evaluation's (train() puts graph.hooks first),
    # so no replica waits for a token while the chief evaluates. Two tokens per
    # replica: a sync loop stops at the last step, so a replica waits for one at most.
    hooks.append(SyncReleaseHook(sync_optimizer.release_op(tokens_per_replica=2)))


def _sync_multi_step_run(cluster, config, global_step, optimizer, hooks, loss_fn, variables) -> fast_path.MultiStep:
    """Sync training with up to ``config.steps_per_run`` steps per session.run (ps_toolkit.sync_loop)."""
    sync_optimizer = _sync_optimizer(cluster, config, optimizer)
    run = sync_loop.multi_step(
        sync_optimizer,
        global_step,
        variables,
        lambda: _loss_and_gradients(config, optimizer, loss_fn, variables),
        steps_per_run=config.steps_per_run,
        last_step=config.train_steps,
    )
    _add_sync_hooks(cluster, sync_optimizer, hooks)
    return run


def _multi_step_run(config, global_step, optimizer, loss_fn, variables) -> fast_path.MultiStep:
    """Async training with ``config.steps_per_run`` steps per session.run (ps_toolkit.fast_path)."""
    step = fast_path.apply_step_fn(
        optimizer, global_step, lambda: _loss_and_gradients(config, optimizer, loss_fn, variables)
    )
    return fast_path.multi_step(step, config.steps_per_run)


def _loss(labels, logits):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def _evaluation_hook(config: TrainConfig, data: DataSplits, partitioner) -> FinalEvaluationHook:
    """Test accuracy with the model's variables, which this creates."""
    images_in = tf.compat.v1.placeholder(tf.float32, [None, data.test_images.shape[1]], name="test_images")
    labels_in = tf.compat.v1.placeholder(tf.int64, [None], name="test_labels")
    with tf.compat.v1.variable_scope("model"):
        logits = build_model(config.model, images_in, partitioner)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), labels_in), tf.float32))
    return FinalEvaluationHook(accuracy, images_in, labels_in, data.test_images, data.test_labels)


def _session_creator(cluster, config, graph, target, session_config):
    if cluster.is_chief:
        return LiveStateChiefSessionCreator(
            graph.scaffold, target, session_config, config.checkpoint_dir, config.readiness_poll_secs
        )
    return FastWorkerSessionCreator(graph.scaffold, target, session_config, config.readiness_poll_secs)


def _chief_saving_hooks(config: TrainConfig, graph: _Graph) -> list:
    if not config.checkpoint_dir:
        return []
    steps = None if config.save_checkpoint_secs else config.save_checkpoint_steps
    saver_hook = tf.compat.v1.train.CheckpointSaverHook(
        config.checkpoint_dir, save_steps=steps, save_secs=config.save_checkpoint_secs, scaffold=graph.scaffold
    )
    # TF's hook assumes a million steps per session.run unless told otherwise, so
    # it reads the global step again after EVERY run: one more round trip to the ps
    # per step, 36% of the sync chief's busy time in a py-spy profile. With the
    # true count it reads only when a save may be due (a save is at most one run late).
    saver_hook._set_steps_per_run(config.steps_per_run)
    return [
        saver_hook,
        tf.compat.v1.train.SummarySaverHook(
            save_steps=config.save_summaries_steps, output_dir=config.checkpoint_dir, scaffold=graph.scaffold
        ),
        tf.compat.v1.train.StepCounterHook(every_n_steps=config.save_summaries_steps, output_dir=config.checkpoint_dir),
    ]


def _step_dependency(cluster: ClusterConfig, config: TrainConfig) -> str:
    """What a training step waits for, for the watchdog's message."""
    if config.sync_replicas:
        return (
            f"gradients from {config.aggregate_count(cluster)} of {cluster.num_replicas} replicas "
            "for each sync step (a replica may be dead or stalled)"
        )
    return "global-step updates through the ps tasks"


def _steps_feed(graph: _Graph, config: TrainConfig, cluster: ClusterConfig, progress: ProgressHook):
    """How many steps the next run takes: fewer near the end, so the replicas stop near train_steps."""
    if graph.multi_step is None or config.sync_replicas:
        # A sync loop stops by itself at the last step: every replica takes every step.
        return None
    count = fast_path.steps_for_next_run(
        progress.last_global_step or 0, config.train_steps, cluster.num_replicas, config.steps_per_run
    )
    return {graph.multi_step.num_steps: count}


def train(
    cluster: ClusterConfig,
    target: str,
    config: TrainConfig,
    data: DataSplits,
    session_config=None,
    on_progress=None,
) -> dict:
    """Trains this replica until the global step reaches ``config.train_steps``.

    Returns the task's result record: job, task, global_step, local_steps,
    first_loss, final_loss, test_accuracy, seconds.
    """
    config.validate(cluster)
    started = time.monotonic()
    with tf.Graph().as_default():
        graph = build_graph(cluster, config, data)
        if cluster.is_chief and config.checkpoint_dir:  # a checkpoint of another model: exit 2 now, said in one line
            checkpoints.check_model_matches_checkpoint(config.checkpoint_dir, tf.compat.v1.global_variables())
        progress = ProgressHook(
            loss=graph.loss,
            global_step=graph.global_step,
            job=cluster.task_type,
            task=cluster.task_index,
            every_secs=config.progress_every_secs,
            every_global_steps=max(1, config.train_steps // PROGRESS_LINES_PER_RUN),
            steps_in_run=graph.multi_step.steps_done if graph.multi_step else None,
            step_after_run=graph.multi_step.global_step if graph.multi_step else None,
        )
        if on_progress is not None:
            progress.add_listener(on_progress)
        hooks = [
            *graph.hooks,
            tf.compat.v1.train.StopAtStepHook(last_step=config.train_steps),
            *([StopAtLastStepHook(graph.multi_step.global_step, config.train_steps)] if graph.multi_step else []),
            tf.compat.v1.train.NanTensorHook(graph.loss),
            progress,
            graph.evaluation,
        ]
        if cluster.is_chief:
            hooks = _chief_saving_hooks(config, graph) + hooks
        creator = _session_creator(cluster, config, graph, target, session_config)
        waiting_for = "the chief to initialize or restore the model" if not cluster.is_chief else "the ps tasks"
        with ProgressWatchdog(cluster, timeout_secs=config.watchdog_secs, waiting_for=waiting_for) as watchdog:
            progress.add_listener(watchdog.beat)
            if cluster.is_chief and config.checkpoint_dir:
                checkpoints.check_ps_share_checkpoint_dir(cluster, target, config.checkpoint_dir, session_config)
            try:
                with tf.compat.v1.train.MonitoredSession(
                    session_creator=creator, hooks=hooks, stop_grace_period_secs=config.stop_grace_secs
                ) as session:
                    watchdog.expect(_step_dependency(cluster, config))
                    while not session.should_stop():
                        session.run(graph.train_op, feed_dict=_steps_feed(graph, config, cluster, progress))
            except tf.compat.v1.train.NanLossDuringTrainingError:
                raise ConfigError(
                    f"loss became NaN near global step {progress.last_global_step}; "
                    f"lower --learning_rate (was {config.effective_learning_rate})"
                ) from None
        if progress.local_steps:
            progress.emit()
    return {
        "job": cluster.task_type,
        "task": cluster.task_index,
        "global_step": progress.last_global_step,
        "local_steps": progress.local_steps,
        "first_loss": progress.first_loss,
        "final_loss": progress.last_loss,
        "test_accuracy": graph.evaluation.test_accuracy,
        "seconds": round(time.monotonic() - started, 3),
    }
