"""Fixed tables to dynamic tables: a TF1 checkpoint's embedding variables become dynamic tables' rows.

``convert`` reads each fixed table (whole or ``part_N``) and its optimizer's
slots, gives each id the row its ``IdMapping`` says, and writes a new
checkpoint in the dynamic tables' own format (``saving.checkpoint_name``: each
id in the save bucket of its ``keys.hash64``), which a model on dynamic tables
restores onto any number of ps. Every other variable (dense layers, their
slots, the global step) is copied across, under its own name or the one a
rename gives it. Everything is checked before anything is written: bad input
is one ConfigError naming the value and where it came from.

Usage: docs/dynamic_embedding.md, "Migration from fixed tables".
"""

from __future__ import annotations

import dataclasses
import glob
import os

import numpy as np
import tensorflow as tf

from ps_toolkit.base import environment_errors
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.dynamic_embedding import id_mappings, table_writer
from ps_toolkit.dynamic_embedding.fixed_tables import OPTIMIZER_SLOTS, Checkpoint
from ps_toolkit.dynamic_embedding.id_mappings import IdMapping, Placement

KEY_DTYPE_NAMES = ("int64", "string")


@dataclasses.dataclass(frozen=True)
class TableConversion:
    """One fixed table (or every table a pattern names) and how its ids found their rows.

    Args:
        fixed: The checkpoint variable's name, or an fnmatch pattern (``model/embeddings_*``).
        mapping: The id -> row mapping the fixed model used (``id_mappings``).
        dynamic: The dynamic table's name (default: the fixed name; only for one table).
        dim: The dynamic table's dim, checked against the checkpoint's (None: not checked).
        key_dtype: The dynamic table's key dtype, "int64" or "string", checked against the mapping's.
        partition_strategy: How the fixed model's lookup split a partitioned table's rows: "div" (the
            toolkit's ``embedding_lookups``, feature columns) or "mod" (``tf.compat.v1.nn.embedding_lookup``'s
            default).
        num_partitions: With "mod", the table's number of parts when the checkpoint holds it whole
            (TF1's Saver writes a partitioned variable as one key); parts saved as ``part_N`` say it themselves.
    """

    fixed: str
    mapping: IdMapping
    dynamic: str | None = None
    dim: int | None = None
    key_dtype: str | None = None
    partition_strategy: str = "div"
    num_partitions: int | None = None


@dataclasses.dataclass(frozen=True)
class TableReport:
    """What one table became: its names, size, mapping, the ids written, and the slots converted."""

    fixed: str
    dynamic: str
    rows: int
    dim: int
    mapping: IdMapping
    placement: Placement
    slots: tuple

    def line(self) -> str:
        """The table's line of the report."""
        placed = self.placement
        source = f" from {self.mapping.source}" if self.mapping.source else ""
        text = (
            f"{self.fixed} -> {self.dynamic}: {len(placed.ids)} {placed.key_dtype} ids written from "
            f"{self.rows} rows x {self.dim} ({self.mapping.kind}{source})"
        )
        if self.mapping.kind in id_mappings.BUCKETED:
            text += (
                f"; {placed.shared_ids} ids shared a row with another id ({placed.shared_rows} rows shared, "
                f"at most {placed.most_per_row} ids in one row)"
            )
        if self.mapping.num_oov_buckets:
            text += f"; {self.mapping.num_oov_buckets} out-of-vocabulary rows not written (their ids are unknown)"
        if placed.repeated:
            text += f"; {placed.repeated} ids given more than once, written once"
        return text + (f"; slots {', '.join(self.slots)}" if self.slots else "")


@dataclasses.dataclass(frozen=True)
class Report:
    """What ``convert`` wrote: the new checkpoint's prefix, its step, the tables and the variables copied."""

    prefix: str
    global_step: int
    optimizer: str
    tables: tuple
    copied: tuple  # (checkpoint name, name written) of every other variable

    def lines(self) -> list[str]:
        """The report, one line per table, then the variables copied and the checkpoint written."""
        renamed = sum(1 for old, new in self.copied if old != new)
        slots = [slot for _, slot in OPTIMIZER_SLOTS[self.optimizer]]
        converted = f"the tables' slots {', '.join(slots)} converted" if slots else "no slots"
        return [
            *(table.line() for table in self.tables),
            f"optimizer {self.optimizer}: {converted}; {len(self.copied)} other variables copied ({renamed} renamed)",
            f"wrote {self.prefix} (global step {self.global_step})",
        ]


def convert(
    checkpoint: str,
    output_dir: str,
    tables: list[TableConversion],
    *,
    optimizer: str = "auto",
    rename: list[tuple[str, str]] = (),
    admit_after: int = 1,
) -> Report:
    """Writes checkpoint ``checkpoint``'s fixed ``tables`` as dynamic tables' rows, and its other variables, to
    a new checkpoint in ``output_dir`` (``model.ckpt-<global step>`` and its state file).

    Args:
        checkpoint: A checkpoint prefix, or the folder holding it (its newest).
        output_dir: A folder with no checkpoint yet (made if absent).
        tables: The tables to convert.
        optimizer: The optimizer of the fixed and dynamic models (``OPTIMIZER_SLOTS``' names): its slots
            of the tables become the dynamic tables' slots. "auto": the one whose slots the checkpoint holds.
        rename: (old, new) name prefixes for the copied variables: a name equal to ``old`` or starting
            with ``old/`` gets ``new`` in its place.
        admit_after: The seen-count each written id starts with: the dynamic table's ``admit_after``,
            so its rows train from the first step.

    Returns:
        The Report.

    Raises:
        ConfigError: Bad input, before anything is written.
    """
    if isinstance(admit_after, bool) or not isinstance(admit_after, int) or admit_after < 1:
        raise ConfigError(f"admit_after={admit_after!r} must be an integer >= 1")
    if not tables:
        raise ConfigError("no table to convert: name at least one fixed table")
    source = Checkpoint(checkpoint)
    named = _named_tables(source, tables)
    optimizer = _optimizer_of(source, [name for name, _, _ in named], optimizer)
    step = source.global_step()
    reports, consumed, written = [], set(), []
    for name, dynamic, spec in named:
        values, read_keys = source.read(name)
        consumed.update(read_keys)
        parts = [source.shapes[key][0] for key in read_keys]
        report, slots = _table_report(source, name, dynamic, spec, (values, parts), optimizer, consumed)
        reports.append(report)
        written.append(_table_rows(report, values, slots, admit_after, step))
    _refuse_leftovers(source, [name for name, _, _ in named], consumed, optimizer)
    taken = {key for table in written for key in table.checkpoint_names()}
    copied = _renamed([key for key in sorted(source.shapes) if key not in consumed], rename, taken)
    _check_output_dir(output_dir)
    variables = {new: source.tensor(old) for old, new in copied}
    prefix = os.path.join(output_dir, f"model.ckpt-{step}")
    with environment_errors.reported(f"writing the converted checkpoint {prefix}"):
        os.makedirs(output_dir, exist_ok=True)
        table_writer.write(prefix, written, variables)
        tf.compat.v1.train.update_checkpoint_state(output_dir, os.path.basename(prefix))
    return Report(prefix, step, optimizer, tuple(reports), tuple(copied))


def _named_tables(source: Checkpoint, tables: list[TableConversion]) -> list[tuple[str, str, TableConversion]]:
    """(fixed name, dynamic name, its conversion) for every table the conversions name, each named once."""
    named, dynamic_names = [], {}
    for spec in tables:
        names = source.table_names(spec.fixed)
        if spec.dynamic and len(names) > 1:
            raise ConfigError(
                f"table {spec.fixed} names {len(names)} tables ({', '.join(names[:3])}, ...): "
                f"one dynamic name ({spec.dynamic}) cannot take them all; leave it out to keep their names"
            )
        for name in names:
            dynamic = spec.dynamic or name
            if dynamic in dynamic_names:
                raise ConfigError(
                    f"dynamic table {dynamic} would get both {dynamic_names[dynamic]} and {name}; give each its own"
                )
            dynamic_names[dynamic] = name
            named.append((name, dynamic, spec))
    return named


def _optimizer_of(source: Checkpoint, names: list[str], optimizer: str) -> str:
    """The optimizer whose slots come along: ``optimizer``, or the one detected; ConfigError if a slot is missing."""
    if optimizer == "auto":
        optimizer = source.detect_optimizer(names)
    if optimizer not in OPTIMIZER_SLOTS:
        raise ConfigError(f"optimizer {optimizer!r} is not one of auto, {', '.join(OPTIMIZER_SLOTS)}")
    for name in names:
        for suffix, _ in OPTIMIZER_SLOTS[optimizer]:
            if source.slot_keys(name, suffix) is None:
                raise ConfigError(
                    f"checkpoint {source.prefix} holds no {name}/{suffix}: table {name} was not trained by "
                    f"{optimizer} (its slot {suffix} is missing); give the optimizer the fixed model used"
                )
    return optimizer


def _table_report(source, name, dynamic, spec, values_and_parts, optimizer, consumed) -> tuple[TableReport, dict]:
    """(the table's TableReport, its dynamic slot name -> values) once its dim, ids and slots are checked.

    The report's placement holds each id's row in the saved table (``id_mappings.stored_rows``).
    """
    values, parts = values_and_parts
    rows, dim = values.shape
    if spec.dim is not None and spec.dim != dim:
        raise ConfigError(
            f"checkpoint {source.prefix}: {name} has rows of dim {dim}; the dynamic table {dynamic} has dim {spec.dim}"
        )
    placement = id_mappings.place(spec.mapping, rows, name)
    placement = dataclasses.replace(placement, rows=_stored_rows(source, name, spec, placement.rows, parts, rows))
    if spec.key_dtype is not None:
        if spec.key_dtype not in KEY_DTYPE_NAMES:
            raise ConfigError(f"key dtype {spec.key_dtype!r} of {dynamic} is not one of {', '.join(KEY_DTYPE_NAMES)}")
        if spec.key_dtype != placement.key_dtype:
            raise ConfigError(
                f"dynamic table {dynamic} has {spec.key_dtype} keys, but the {spec.mapping.kind} mapping of {name} "
                f"gives {placement.key_dtype} ids"
            )
    slots = {}
    for suffix, slot in OPTIMIZER_SLOTS[optimizer]:
        slot_values, slot_keys = source.read_slot(name, suffix)
        if slot_values.shape != values.shape:
            raise ConfigError(
                f"checkpoint {source.prefix}: slot {name}/{suffix} is {list(slot_values.shape)}, "
                f"its table {list(values.shape)}"
            )
        consumed.update(slot_keys)
        slots[slot] = slot_values
    report = TableReport(name, dynamic, rows, dim, spec.mapping, placement, tuple(slots))
    return report, slots


def _stored_rows(source, name, spec, rows, parts, num_rows):
    """The saved rows the lookup's ``rows`` are, under the table's partition strategy."""
    if len(parts) == 1 and spec.num_partitions is not None:
        count = spec.num_partitions
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigError(f"table {name}: num_partitions={count!r} must be an integer >= 1")
        parts = [num_rows // count + (1 if p < num_rows % count else 0) for p in range(count)]
    elif spec.num_partitions is not None and spec.num_partitions != len(parts):
        raise ConfigError(
            f"checkpoint {source.prefix} holds {name} in {len(parts)} parts, not num_partitions={spec.num_partitions}"
        )
    elif len(parts) == 1 and spec.partition_strategy == "mod":
        raise ConfigError(
            f"checkpoint {source.prefix} holds {name} whole: the mod partition strategy needs its number of "
            "parts (num_partitions, --num_partitions)"
        )
    return id_mappings.stored_rows(rows, num_rows, spec.partition_strategy, parts, name)


def _refuse_leftovers(source: Checkpoint, names: list[str], consumed: set, optimizer: str) -> None:
    """ConfigError if a converted table has variables of its own left (another optimizer's slots)."""
    for name in names:
        left = sorted(key for key in source.shapes if key.startswith(name + "/") and key not in consumed)
        if left:
            raise ConfigError(
                f"checkpoint {source.prefix} holds {left[0]} beside table {name}, which is no slot of {optimizer}: "
                "give the optimizer the fixed model used"
            )


def _renamed(names: list[str], rename, taken: set) -> list[tuple[str, str]]:
    """(name, name written) for each of ``names`` under ``rename``; ConfigError on an unused rule or a clash."""
    olds = [old.rstrip("/") for old, _ in rename]
    twice = sorted({old for old in olds if olds.count(old) > 1})
    if twice:
        raise ConfigError(f"rename {twice[0]}=... is given twice; give each name one new name")
    used, result, targets = set(), [], {}
    for name in names:
        new = name
        for old, replacement in rename:
            if name == old or name.startswith(old.rstrip("/") + "/"):
                new = replacement.rstrip("/") + name[len(old.rstrip("/")) :]
                used.add(old)
                break
        if new in targets or new in taken:
            raise ConfigError(f"variable {name} is renamed {new}, a name another variable or table already has")
        targets[new] = name
        result.append((name, new))
    for old, replacement in rename:
        if old not in used:
            raise ConfigError(f"rename {old}={replacement}: no variable of the checkpoint is named {old} or {old}/...")
    return result


def _check_output_dir(output_dir: str) -> None:
    """The output folder, made now if new: a file, a folder holding anything, or one that cannot be made is
    refused (ConfigError), so that a conversion never mixes its files with others'."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ConfigError(f"output dir {output_dir} is a file, not a folder")
    if os.path.exists(os.path.join(output_dir, "checkpoint")) or glob.glob(os.path.join(output_dir, "*.index")):
        raise ConfigError(f"output dir {output_dir} already holds a checkpoint; give a new or empty folder")
    if os.path.isdir(output_dir) and os.listdir(output_dir):
        raise ConfigError(f"output dir {output_dir} is not empty; give a new or empty folder")
    try:
        os.makedirs(output_dir, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"output dir {output_dir} cannot be made: {err.strerror or err}") from None


def _table_rows(report: TableReport, values, slots: dict, admit_after: int, step: int) -> table_writer.TableRows:
    """What ``table_writer`` writes of one table: each id's fixed row, its meta and its slots."""
    placed = report.placement
    meta = np.tile(np.array([[admit_after, step]], dtype=np.int64), (len(placed.ids), 1))
    components = {"rows": values[placed.rows], "meta": meta}
    components.update({f"slot_{name}": slot[placed.rows] for name, slot in slots.items()})
    key_dtype = tf.string if placed.key_dtype == "string" else tf.int64
    return table_writer.TableRows(report.dynamic, placed.ids, key_dtype, components)
