"""Dynamic embedding tables on core TensorFlow: id -> row hash tables sharded over the ps, trained, saved, served.

Usage: docs/dynamic_embedding.md. Design: docs/design.md, "Dynamic embedding tables".
"""

from ps_toolkit.dynamic_embedding import delta_files, layout, table_ops
from ps_toolkit.dynamic_embedding.delta_checkpoints import DeltaCheckpointHook, DeltaMergingSaver
from ps_toolkit.dynamic_embedding.initial_rows import InitialRows
from ps_toolkit.dynamic_embedding.keys import KEY_DTYPES, NUM_SAVE_BUCKETS
from ps_toolkit.dynamic_embedding.lookup_batches import batched_lookups
from ps_toolkit.dynamic_embedding.lookups import COMBINERS, lookup, lookup_sparse
from ps_toolkit.dynamic_embedding.maintenance import TableMaintenanceHook
from ps_toolkit.dynamic_embedding.optimizer import (
    TableOptimizer,
    TableRows,
    is_table_rows,
    sync_gradients,
    sync_shard_variables,
    table_gradients,
)
from ps_toolkit.dynamic_embedding.saving import checkpoint_differences, require_filled_tables
from ps_toolkit.dynamic_embedding.table import (
    UNBOUNDED,
    DynamicTable,
    clear_graph_collections,
    get_table,
    shard_devices,
    tables_of_graph,
)

__all__ = [
    "batched_lookups",
    "COMBINERS",
    "KEY_DTYPES",
    "NUM_SAVE_BUCKETS",
    "DeltaCheckpointHook",
    "DeltaMergingSaver",
    "DynamicTable",
    "InitialRows",
    "TableMaintenanceHook",
    "TableOptimizer",
    "TableRows",
    "UNBOUNDED",
    "checkpoint_differences",
    "clear_graph_collections",
    "get_table",
    "is_table_rows",
    "delta_files",
    "layout",
    "lookup",
    "lookup_sparse",
    "require_filled_tables",
    "shard_devices",
    "sync_gradients",
    "sync_shard_variables",
    "table_gradients",
    "table_ops",
    "tables_of_graph",
]
