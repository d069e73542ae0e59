"""TFRA's ``dynamic_embedding.Variable`` and ``get_variable``, each Variable one ps_toolkit dynamic table.

TFRA's arguments are all accepted as TFRA accepted them; what they become here:
``devices`` one shard per entry (repeats allowed); ``partitioner`` is not used
(ids go to shards by the table's own hash, which checkpoints re-shard by);
``initializer`` see ``initializers``; ``trainable=False`` leaves the table out
of training; ``checkpoint``, ``init_size``, ``shared_name``, ``bp_v2`` change
nothing (the tables are always saved, grow as needed, and every update is
computed on the ps from the row there, so the lost-update race ``bp_v2``
fixes does not arise); ``kv_creator`` may be TFRA's default (Cuckoo) creator.
"""

from __future__ import annotations

import weakref

import tensorflow as tf

from ps_toolkit import dynamic_embedding as tables
from ps_toolkit.dynamic_embedding import table_ops
from ps_toolkit_compat import tf_internals
from ps_toolkit_compat.tfra import arguments, errors, initializers, refused, restrict, variable_ops
from ps_toolkit_compat.tfra.refused import NotServedUseError

# graph -> {name: Variable}. Not a graph collection: an exported MetaGraph would list the names as
# graph elements, and loading the SavedModel would fail on them.
_VARIABLES_BY_GRAPH = weakref.WeakKeyDictionary()
# The (key, value) dtype pairs TFRA's CPU table took; the values it could not train are not served here.
TFRA_DTYPE_PAIRS = {
    tf.int64: (tf.float32, tf.half, tf.bfloat16, tf.int32, tf.int8, tf.int64, tf.float64, tf.string),
    tf.int32: (tf.float32, tf.int32, tf.float64, tf.bfloat16),
    tf.string: (tf.float32, tf.half, tf.bfloat16, tf.int32, tf.int8, tf.int64, tf.float64, tf.bool),
}
SERVED_VALUE_DTYPES = (tf.float32, tf.float64, tf.half, tf.bfloat16)
# Integer values TFRA's tables held (never trained): kept exactly as float64 rows, read back as their own dtype.
# int64 values are not among them: float64 holds them exactly only up to 2**53.
STORED_AS_FLOAT64 = (tf.int32, tf.int8)


def _stored_dtype(value_dtype: tf.DType) -> tf.DType:
    """The dtype a Variable's rows are kept in: its own, float64 for integers, float32 for bfloat16.

    TensorFlow has no CPU hash table kernel of bfloat16 values, so bfloat16 rows are kept as float32
    (exact: every bfloat16 is a float32) and read back rounded to bfloat16.
    """
    if value_dtype in STORED_AS_FLOAT64:
        return tf.float64
    return tf.float32 if value_dtype == tf.bfloat16 else value_dtype


def default_partition_fn(keys, shard_num):
    """TFRA's default partitioner, accepted for scripts that pass it; the tables shard by their own hash."""
    return tf.cast(keys % shard_num, dtype=tf.int32)


class CuckooHashTableConfig:
    """TFRA's (empty) config of its default CPU table."""


class KVCreator:
    """TFRA's table-creator base class; only its default CPU creator is served."""

    def __init__(self, config=None, saver=None):
        if saver is not None:
            raise NotServedUseError(f"kv_creator saver {saver!r}: {refused.FILES}")
        self.config, self.saver = config, saver


class CuckooHashTableCreator(KVCreator):
    """TFRA's default CPU table: here, a ps_toolkit dynamic table (TensorFlow's MutableHashTable per shard)."""


def variables_of_graph(graph=None) -> dict:
    """{name: Variable} of the Variables made in ``graph`` (default: the default graph)."""
    graph = graph or tf.compat.v1.get_default_graph()
    return _VARIABLES_BY_GRAPH.setdefault(graph, {})


def _check_dtypes(key_dtype, value_dtype) -> tuple[tf.DType, tf.DType]:
    key_dtype, value_dtype = tf.as_dtype(key_dtype), tf.as_dtype(value_dtype)
    served = SERVED_VALUE_DTYPES + STORED_AS_FLOAT64
    if value_dtype not in TFRA_DTYPE_PAIRS.get(key_dtype, ()):
        # TFRA's text, listing only the pairs served here: a pair TFRA took but these tables refuse is no advice.
        valid = [
            [key.name, value.name] for key, values in TFRA_DTYPE_PAIRS.items() for value in values if value in served
        ]
        raise errors.TfraTypeError(f"key-value dtype ({key_dtype.name}-{value_dtype.name}) is not support! {valid}")
    if value_dtype not in served:
        raise NotServedUseError(
            f"a dynamic_embedding.Variable of {value_dtype.name} values is not served: the tables hold "
            "float rows (float32, float64, float16, bfloat16; int32 and int8 values are kept as float64)"
        )
    return key_dtype, value_dtype


def _check_creator(kv_creator) -> None:
    if kv_creator is not None and type(kv_creator) is not CuckooHashTableCreator:
        raise NotServedUseError(
            f"kv_creator {type(kv_creator).__name__}: only TFRA's default CuckooHashTableCreator is served"
        )


def _devices_list(devices):
    if devices is None:
        return None  # the tables' default: every ps under the toolkit, else one shard where the session runs
    return list(devices) if isinstance(devices, (list, tuple)) else [devices]


class Variable(tf_internals.trackable_base()):
    """A TFRA dynamic embedding variable over one ps_toolkit dynamic table (``self.table``).

    A Trackable, so ``tf.compat.v1.train.Saver(var_list=[..., variable])`` saves its table.

    Example (TF1 graph mode, as in TFRA):
        users = de.get_variable("user", dim=8, devices=["/job:ps/task:0", "/job:ps/task:1"])
        rows = de.embedding_lookup(users, ids)
    """

    def __init__(
        self,
        key_dtype=tf.int64,
        value_dtype=tf.float32,
        dim=1,
        devices=None,
        partitioner=default_partition_fn,
        shared_name=None,
        name="DynamicEmbedding_Variable",
        initializer=None,
        trainable=True,
        checkpoint=True,
        init_size=0,
        kv_creator=None,
        restrict_policy=None,
        bp_v2=False,
        short_file_name=False,
    ):
        errors.require_graph_mode("dynamic_embedding.Variable")
        self.key_dtype, self.value_dtype = _check_dtypes(key_dtype, value_dtype)
        _check_creator(kv_creator)
        self.dim, self.name = dim, name
        # Integer values are never trained (TFRA could not train them either).
        self.trainable = trainable and self.value_dtype not in STORED_AS_FLOAT64
        self.table_value_dtype = _stored_dtype(self.value_dtype)
        self.partition_fn, self.shared_name = partitioner, shared_name or f"shared_name.{name}"
        self.checkpoint, self.init_size, self.bp_v2 = checkpoint, arguments.checked_init_size(init_size, name), bp_v2
        self.short_file_name = short_file_name
        self.kv_creator = kv_creator or CuckooHashTableCreator()
        self.initializer = initializer
        self._trainable_store = {}
        table_key_dtype = tf.int64 if self.key_dtype == tf.int32 else self.key_dtype
        # TFRA names a Variable exactly ``name``; get_table would add the variable scope again.
        with tf.compat.v1.variable_scope(tf.compat.v1.VariableScope(reuse=None, name="")):
            self.table = errors.translated(
                lambda: tables.get_table(
                    name,
                    dim,
                    key_dtype=table_key_dtype,
                    value_dtype=self.table_value_dtype,
                    initializer=initializers.rows_for(initializer, dim, name),
                    devices=_devices_list(devices),
                )
            )
        self.devices = [device or "" for device in self.table.devices]
        self.shard_num = self.table.num_shards
        self._tables = [variable_ops.ShardTable(self, index) for index in range(self.shard_num)]
        # Built now, outside any control dependency: size() called once the graph is finalized (a
        # MonitoredTrainingSession's) returns these instead of building new ops.
        with tf.control_dependencies(None), tf.name_scope(f"{name}_size"):
            self._sizes = [table_ops.size(self.table)] + self.table.shard_sizes()
        self._restrict_policy = restrict.make_policy(restrict_policy, self)
        variables_of_graph()[name] = self

    @property
    def restrict_policy(self):
        return self._restrict_policy

    @property
    def trainable_store(self) -> dict:
        return self._trainable_store

    def get_trainable_by_name(self, name):
        if not isinstance(name, str):
            raise TypeError("name should be a string")
        return self._trainable_store.get(name)

    def read_values(self, rows: tf.Tensor) -> tf.Tensor:
        """Rows read from the table as the Variable's value dtype (integer values are kept as float64)."""
        return rows if rows.dtype == self.value_dtype else tf.cast(rows, self.value_dtype)

    def table_ids(self, ids: tf.Tensor) -> tf.Tensor:
        """``ids`` as the table takes them (int32 keys are kept as int64)."""
        return tf.cast(ids, tf.int64) if self.key_dtype == tf.int32 else ids

    def size(self, index=None, name=None):
        """Rows in all shards, or in shard ``index``: an int64 scalar tensor (in a finalized graph, the one built
        with the Variable)."""
        if tf.compat.v1.get_default_graph().finalized:
            return self._sizes[0 if index is None else index + 1]
        with tf.name_scope(name or "size"):
            return table_ops.size(self.table) if index is None else self.table.shard_sizes()[index]

    @property
    def tables(self) -> list:
        """One ``ShardTable`` per shard (TFRA's per-shard hash tables), e.g. for a Saver's ``var_list``."""
        return list(self._tables)

    def _kv_file_names(self, file_name_list, proc_size, proc_rank) -> list:
        """TFRA's file names of the shards: given, or NAME_mht_IofN_rankR_sizeS."""
        if file_name_list is not None:
            return list(file_name_list)
        suffix = f"of{self.shard_num}_rank{proc_rank}_size{proc_size}"
        return [f"{t.name[: t.name.rfind('_mht_')]}_mht_{i + 1}{suffix}" for i, t in enumerate(self._tables)]

    def save_to_file_system(self, dirpath, proc_size=1, proc_rank=0, file_name_list=None, **kwargs):
        """TFRA's: each shard's ids and rows to its ``-keys`` / ``-values`` files in ``dirpath``."""
        names = self._kv_file_names(file_name_list, proc_size, proc_rank)
        return tf.group(
            *[
                table.save_to_file_system(dirpath, file_name=n, **kwargs)
                for table, n in zip(self._tables, names, strict=True)
            ]
        )

    def load_from_file_system(self, dirpath, proc_size=1, proc_rank=0, file_name_list=None, **kwargs):
        """TFRA's: the rows of each shard's ``-keys`` / ``-values`` files in ``dirpath``, inserted."""
        names = self._kv_file_names(file_name_list, proc_size, proc_rank)
        return tf.group(
            *[
                table.load_from_file_system(dirpath, file_name=n, **kwargs)
                for table, n in zip(self._tables, names, strict=True)
            ]
        )

    def upsert(self, keys, values, name=None):
        """Writes ``values`` (``keys.shape + [dim]``) as the rows of ``keys``."""
        return variable_ops.upsert(self, keys, values, name)

    def remove(self, keys, name=None):
        """Removes ``keys`` (row, optimizer slots, records)."""
        return variable_ops.remove(self, keys, name)

    def clear(self, name=None):
        """Removes every key."""
        return variable_ops.clear(self, name)

    def accum(self, keys, old_values, new_values, exists, name=None):
        """Adds ``new_values - old_values`` where ``exists`` still holds, inserts ``new_values`` where the key is
        still absent (TFRA's accum)."""
        return variable_ops.accum(self, keys, old_values, new_values, exists, name)

    def get_slot_variables(self, optimizer):
        """The slot tables ``optimizer`` keeps for this Variable's TrainableWrappers (TFRA's list of slot variables)."""
        if not isinstance(optimizer, tf.compat.v1.train.Optimizer):
            raise errors.TfraTypeError(f"Expect an optimizer, but get {type(optimizer)}")
        slots = [
            optimizer.get_slot(wrapper, name)
            for wrapper in self._trainable_store.values()
            for name in optimizer.get_slot_names()
        ]
        return [slot.params for slot in slots if slot is not None]

    def _gather_saveables_for_checkpoint(self):
        return variable_ops.variable_saveables(self)

    def embedding_lookup(self, ids, name=None, max_norm=None, return_trainable=False):
        from ps_toolkit_compat.tfra import lookups

        return lookups.embedding_lookup(
            self, ids, name=(name or "") + "/embedding_lookup", max_norm=max_norm, return_trainable=return_trainable
        )

    def lookup(self, keys, return_exists=False, name=None):
        """The rows of ``keys`` (their initial rows where absent); never inserts."""
        from ps_toolkit_compat.tfra import lookups

        return lookups.read_rows(self, keys, return_exists=return_exists, name=name)

    def export(self, name=None):
        """(keys, values) of every row of every shard."""
        with tf.name_scope(name or "export"):
            keys, values = table_ops.export(self.table)
            return (tf.cast(keys, tf.int32) if self.key_dtype == tf.int32 else keys), self.read_values(values)

    def restrict(self, num_reserved, **kwargs):
        """The op keeping ``num_reserved`` rows (``trigger=``: only when there are more than that); None without
        a restrict policy, as in TFRA."""
        if self._restrict_policy is None:
            tf.compat.v1.logging.warning("Call restrict without setting restrict policy.")
            return None
        return self._restrict_policy.apply_restriction(num_reserved, **kwargs)

    def __getattr__(self, name):
        if name.startswith("_"):  # Trackable's lazily made private state, and Python's own
            raise AttributeError(name)
        raise errors.not_served_member("Variable", name)

    def __repr__(self):
        return f"<dynamic_embedding.Variable {self.name!r} dim={self.dim} shards={self.shard_num}>"


def get_variable(
    name,
    key_dtype=tf.int64,
    value_dtype=tf.float32,
    dim=1,
    devices=None,
    partitioner=default_partition_fn,
    shared_name="get_variable",
    initializer=None,
    trainable=True,
    checkpoint=True,
    init_size=0,
    kv_creator=None,
    restrict_policy=None,
    bp_v2=False,
    short_file_name=False,
):
    """The Variable ``name`` in the current variable scope, made on first call (TFRA's get_variable)."""
    errors.require_graph_mode("dynamic_embedding.get_variable")
    scope = tf.compat.v1.get_variable_scope()
    full_name = f"{scope.name}/{name}" if scope.name and not short_file_name else name
    existing = variables_of_graph()
    if full_name in existing:
        if scope.reuse is False or scope.reuse is None:
            raise errors.TfraValueError(
                f"Variable {full_name} already exists, disallowed. Did you mean to set reuse=True or "
                "reuse=tf.AUTO_REUSE in VarScope?"
            )
        return existing[full_name]
    variable = Variable(
        key_dtype=key_dtype,
        value_dtype=value_dtype,
        dim=dim,
        devices=devices,
        partitioner=partitioner,
        shared_name=shared_name,
        name=full_name,
        initializer=initializer,
        trainable=trainable,
        checkpoint=checkpoint,
        init_size=init_size,
        kv_creator=kv_creator,
        restrict_policy=restrict_policy,
        bp_v2=bp_v2,
        short_file_name=short_file_name,
    )
    return variable
