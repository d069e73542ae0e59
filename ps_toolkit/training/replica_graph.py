"""One replica's training graph from a model_fn and an input_fn: input, model, optimizer step, hooks.

Design: docs/design.md, "One replica's step".
"""

from __future__ import annotations

import dataclasses
import logging
import os

import tensorflow as tf

from ps_toolkit import dynamic_embedding
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.placement import near_weights, strategies
from ps_toolkit.training import multi_step, optimizers, packed_transfer, sparse_lookup, user_code
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.input_pipeline import train_batches
from ps_toolkit.training.model_api import ModeKeys, ModelDefinition
from ps_toolkit.training.model_calls import call_model_fn
from ps_toolkit.training.sync_hooks import SyncReleaseHook, SyncReplicasHook
from ps_toolkit.training.sync_replicas import PerReplicaSyncOptimizer

log = logging.getLogger(__name__)
# The chief evicts from and measures the dynamic tables this many times over a run (and at its end).
TABLE_MAINTENANCE_RUNS = 20


@dataclasses.dataclass
class TrainGraph:
    """The tensors and hooks one replica's training graph provides."""

    global_step: tf.Tensor
    train_op: tf.Operation
    loss: tf.Tensor
    hooks: list
    scaffold: tf.compat.v1.train.Scaffold
    partitioner: object  # how the model's large variables were split (None: not split); evaluation splits them alike
    multi_step: multi_step.MultiStep | None = None  # when the toolkit runs several steps per session.run
    learning_rate: float | None = None  # None: the model_fn's own train_op


def placement_strategy(placement: str):
    """``--placement``'s strategy: a registered name as it is, ``MODULE:FUNCTION`` as the function it names."""
    return user_code.load(placement, "placement") if ":" in placement else placement


def build(cluster: ClusterConfig, config: TrainConfig, definition: ModelDefinition) -> TrainGraph:
    """Builds this replica's training graph in the default graph."""
    device_fn = strategies.device_setter(cluster, placement_strategy(config.placement), seed=config.seed)
    partitioner = strategies.variable_partitioner(cluster) if config.partition_variables else None
    runs_near = _near_rule(cluster, config, partitioned=partitioner is not None)
    with tf.compat.v1.device(device_fn):
        global_step = tf.compat.v1.train.get_or_create_global_step()
    next_batch, input_hook = train_batches(cluster, config, definition)
    hooks = [input_hook]
    lookups = sparse_lookup.LookupOptions(config.unique_ids, config.group_lookups, config.wire_dtype)
    with (
        tf.compat.v1.device(device_fn),
        near_weights.rule_in_effect(runs_near),
        sparse_lookup.options_in_effect(lookups),
        dynamic_embedding.shard_devices(ps_devices(cluster)),
    ):
        first = call_model_fn(definition, *next_batch(), ModeKeys.TRAIN, partitioner=partitioner)
        hooks += first.training_hooks
        if first.train_op is not None:
            _log_levers_not_applied(config)
            train_op, loss, multi_step, learning_rate = first.train_op, first.loss, None, None
        else:
            learning_rate = config.learning_rate_for(definition.default_learning_rates)
            optimizer = optimizers.make(config.optimizer, learning_rate)
            if dynamic_embedding.tables_of_graph():
                # The model_fn made dynamic tables: the same optimizer trains their rows on their shards.
                optimizer = dynamic_embedding.TableOptimizer(optimizer)
            trained, sparse = _trained_variables(definition, optimizer, first.loss, config)

            def loss_fn(custom_getter=None):
                # The batch is taken here, where the loss is built: inside the in-graph
                # loop's body, so that every step of a run trains on a batch of its own.
                spec = call_model_fn(
                    definition,
                    *next_batch(),
                    ModeKeys.TRAIN,
                    partitioner=partitioner,
                    reuse=True,
                    custom_getter=custom_getter,
                    inner=True,
                )
                return spec.loss

            step = _StepBuilder(cluster, config, global_step, optimizer, loss_fn, trained, sparse, hooks)
            train_op, loss, multi_step = step.build()
        tf.compat.v1.summary.scalar("loss", loss)
    tables = dynamic_embedding.tables_of_graph()
    if tables and cluster.is_chief:
        every = max(1, config.interval_steps // TABLE_MAINTENANCE_RUNS)
        hooks.append(dynamic_embedding.TableMaintenanceHook(tables, every, summary_dir=config.checkpoint_dir))
    if cluster.is_chief:
        strategies.log_placement_report(strategies.placement_report(num_ps=cluster.num_ps), log)
    # No replica is ready on a restarted ps's empty table shards until the chief restored them.
    dynamic_embedding.require_filled_tables()
    scaffold = tf.compat.v1.train.Scaffold(
        # The chief's restores merge the newest delta checkpoint of the dynamic tables (docs/online.md):
        # its ops are built when this job writes deltas or its folder holds one.
        saver=dynamic_embedding.DeltaMergingSaver(
            max_to_keep=5, sharded=True, deltas=cluster.is_chief and _may_restore_deltas(config)
        ),
        ready_for_local_init_op=_ready_for_local_init(cluster, hooks),
    )
    return TrainGraph(global_step, train_op, loss, hooks, scaffold, partitioner, multi_step, learning_rate)


def _may_restore_deltas(config: TrainConfig) -> bool:
    """Whether the chief may meet a delta checkpoint: it writes them, or its checkpoint folder holds one."""
    if config.deltas:
        return True
    return bool(config.checkpoint_dir) and os.path.exists(
        os.path.join(config.checkpoint_dir, dynamic_embedding.delta_files.STATE_FILE)
    )


def ps_devices(cluster: ClusterConfig) -> list[str] | None:
    """The ps devices a dynamic table is sharded over (None: no ps, one local shard)."""
    return [f"/job:ps/task:{index}" for index in range(cluster.num_ps)] or None


def _near_rule(cluster: ClusterConfig, config: TrainConfig, *, partitioned: bool):
    """Which of the model's dense layers run on the ps holding their weights (--compute_near_weights)."""
    return near_weights.near_rule(
        config.compute_near_weights,
        config.batch_size,
        worker_has_gpu=bool(tf.config.list_physical_devices("GPU")),
        partitioned=partitioned,
        # A layer's matrix lives on one ps, which would do every replica's arithmetic for it.
        num_replicas=cluster.num_replicas,
    )


def _ready_for_local_init(cluster: ClusterConfig, hooks: list):
    """For a sync replica other than the chief: the uninitialized variables, and the chief's aggregation
    until its init has run (after a restore the variables are ready first). None: TensorFlow's default."""
    sync = [hook for hook in hooks if isinstance(hook, SyncReplicasHook)]
    if cluster.is_chief or not sync:
        return None
    variables = tf.compat.v1.report_uninitialized_variables(tf.compat.v1.global_variables())
    return tf.concat([variables, sync[0].optimizer.aggregation_not_ready_op()], 0)


def _log_levers_not_applied(config: TrainConfig) -> None:
    levers = ["--optimizer", "--learning_rate", "--steps_per_run (one step per run)", "packed transfers"]
    if config.sync_replicas:
        levers.append("--sync_replicas (per-replica sync tokens; the model_fn's own optimizer decides)")
    log.warning("the model_fn returns its own train_op, which runs as it is; not applied: %s", ", ".join(levers))


def _trained_variables(definition: ModelDefinition, optimizer, loss, config: TrainConfig) -> tuple[list, frozenset]:
    """The trainable variables the loss has a gradient for, and the names of those whose gradient is sparse.

    A sparse gradient stays sparse when its variable moves unpacked (large
    variables, or packing off): the sync aggregation then keeps a sparse
    accumulator for it.
    """
    pairs = optimizer.compute_gradients(loss, var_list=tf.compat.v1.trainable_variables())
    trained = [var for grad, var in pairs if grad is not None and not dynamic_embedding.is_table_rows(var)]
    if not trained and not pairs:
        raise ConfigError(f"the loss of {definition.name} depends on no trainable variable: nothing to train")
    sparse = frozenset(
        var.name
        for grad, var in pairs
        if isinstance(grad, tf.IndexedSlices)
        and not dynamic_embedding.is_table_rows(var)
        and not (config.packed_transfers and packed_transfer.packs(var))
    )
    if config.steps_per_run > 1 and not config.sync_replicas:
        # Slots (Adagrad's accumulators, Adam's moments) cannot be created inside the
        # loop's body; this unrun update creates them here, beside their variables.
        optimizer.apply_gradients([(grad, var) for grad, var in pairs if grad is not None])
    return trained, sparse


class _StepBuilder:
    """The optimizer step for a loss: one or several per session.run, async or sync."""

    def __init__(self, cluster, config, global_step, optimizer, loss_fn, variables, sparse_names, hooks):
        self._cluster, self._config = cluster, config
        self._global_step, self._optimizer = global_step, optimizer
        self._loss_fn, self._variables, self._sparse_names = loss_fn, variables, sparse_names
        self._hooks = hooks

    def build(self) -> tuple:
        """(train op, loss, MultiStep or None); adds the sync hooks when sync."""
        config = self._config
        if config.steps_per_run > 1 and config.sync_replicas:
            run = self._sync_multi_step()
        elif config.steps_per_run > 1:
            step = multi_step.apply_step_fn(self._optimizer, self._global_step, self._loss_and_gradients)
            # Dynamic tables' lookups and updates run on the ps, which only TF1 control flow allows in a loop.
            tf1_loop = bool(self._sparse_names) or bool(dynamic_embedding.tables_of_graph())
            run = multi_step.multi_step(step, config.steps_per_run, tf1_loop=tf1_loop)
        else:
            train_op, loss = self._single_step()
            return train_op, loss, None
        return run.global_step.op, run.loss, run

    def _loss_and_gradients(self) -> tuple:
        """The training loss and its (gradient, variable) pairs, moved packed unless every layer runs on the ps."""
        if self._config.packed_transfers:
            loss, pairs = packed_transfer.loss_and_gradients(self._loss_fn, self._variables)
            if isinstance(self._optimizer, dynamic_embedding.TableOptimizer):
                pairs = pairs + self._optimizer.table_gradients(loss)
            return loss, pairs
        loss = self._loss_fn()
        # A layer run beside its weights keeps its backward pass there too.
        colocate = self._config.compute_near_weights != "none"
        pairs = self._optimizer.compute_gradients(loss, self._variables, colocate_gradients_with_ops=colocate)
        return loss, [(grad, var) for grad, var in pairs if grad is not None]

    def _single_step(self) -> tuple:
        loss, grads_and_vars = self._loss_and_gradients()
        if not self._config.sync_replicas:
            return self._optimizer.apply_gradients(grads_and_vars, global_step=self._global_step), loss
        sync_optimizer = self._sync_optimizer()
        # A dynamic table's gradient is aggregated per shard, keyed by id (no-op without tables).
        grads_and_vars = dynamic_embedding.sync_gradients(grads_and_vars)
        train_op = sync_optimizer.apply_gradients(grads_and_vars, global_step=self._global_step)
        self._add_sync_hooks(sync_optimizer)
        return train_op, loss

    def _sync_multi_step(self) -> multi_step.MultiStep:
        sync_optimizer = self._sync_optimizer()
        # Each shard of each dynamic table is aggregated like a sparse variable (none without tables).
        shards = dynamic_embedding.sync_shard_variables()

        def loss_and_gradients():
            loss, pairs = self._loss_and_gradients()
            return loss, dynamic_embedding.sync_gradients(pairs)

        run = multi_step.sync_multi_step(
            sync_optimizer,
            self._global_step,
            self._variables + shards,
            loss_and_gradients,
            steps_per_run=self._config.steps_per_run,
            last_step=self._config.last_step,
            sparse_names=self._sparse_names | {shard.name for shard in shards},
        )
        self._add_sync_hooks(sync_optimizer)
        return run

    def _sync_optimizer(self) -> PerReplicaSyncOptimizer:
        return PerReplicaSyncOptimizer(
            self._optimizer,
            replicas_to_aggregate=self._config.aggregate_count(self._cluster),
            total_num_replicas=self._cluster.num_replicas,
            replica_index=self._cluster.replica_index,
            last_step=self._config.last_step,
        )

    def _add_sync_hooks(self, sync_optimizer) -> None:
        # Every replica needs the hook: it runs the local-step init and,
        # on the chief, the token init and the aggregating queue runner.
        self._hooks.append(SyncReplicasHook(sync_optimizer, self._cluster.is_chief))
        # Its end() runs before the final evaluation's (train() puts graph.hooks first),
        # so no replica waits for a token while the chief evaluates. Two tokens per
        # replica: a sync loop stops at the last step, so a replica waits for one at most.
        self._hooks.append(SyncReleaseHook(sync_optimizer.release_op(tokens_per_replica=2)))
