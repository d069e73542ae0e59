"""A TF1 checkpoint's fixed embedding tables: found by name or pattern, read whole or from ``part_N`` slices,
with the slots their optimizer keeps beside them.

A partitioned variable saved by TF1's Saver is one checkpoint key holding the
whole table (its slices are put back together on read); a variable saved
part by part is ``<name>/part_0`` .. ``<name>/part_N``, row slices in order.
An optimizer's slot of table ``T`` is ``T/<Slot>`` (or ``T/part_i/<Slot>``),
``<Slot>`` the slot's TF1 name (``Adagrad``, ``Adam_1``, ...).
"""

from __future__ import annotations

import fnmatch
import os
import re

import numpy as np
import tensorflow as tf

from ps_toolkit.base.errors import ConfigError, error_summary

_PART = re.compile(r"^(?P<base>.+)/part_(?P<index>\d+)$")
_PART_KEY = re.compile(r"/part_\d+(/|$)")

# The slots of each TF1 optimizer with its default name: (the slot's checkpoint suffix, the dynamic table's slot,
# as row_rules names it). tests/test_embedding_conversion.py checks both sides against TensorFlow and row_rules.
OPTIMIZER_SLOTS = {
    "sgd": (),
    "proximal_sgd": (),
    "momentum": (("Momentum", "momentum"),),
    "adagrad": (("Adagrad", "accumulator"),),
    "proximal_adagrad": (("ProximalAdagrad", "accumulator"),),
    "adam": (("Adam", "m"), ("Adam_1", "v")),
    "ftrl": (("Ftrl", "accumulator"), ("Ftrl_1", "linear")),
    "rmsprop": (("RMSProp", "rms"), ("RMSProp_1", "momentum")),
    "rmsprop_centered": (("RMSProp", "rms"), ("RMSProp_1", "mg"), ("RMSProp_2", "momentum")),
    "adadelta": (("Adadelta", "accum"), ("Adadelta_1", "accum_update")),
    "adagrad_da": (("AdagradDA", "gradient_accumulator"), ("AdagradDA_1", "gradient_squared_accumulator")),
}


class Checkpoint:
    """A TF1 checkpoint's variables: ``prefix``, and each key's shape and dtype (nothing read yet)."""

    def __init__(self, path: str):
        prefix = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
        if prefix is None or not os.path.exists(prefix + ".index"):
            where = "a folder with no checkpoint state file" if os.path.isdir(path) else "no checkpoint"
            raise ConfigError(f"checkpoint {path}: {where} (give a checkpoint prefix, or the folder holding it)")
        self.prefix = prefix
        try:
            self.reader = tf.compat.v1.train.NewCheckpointReader(prefix)
        except (tf.errors.OpError, ValueError, RuntimeError) as err:
            raise self.unreadable(err) from None
        # Keys starting with "_" are TensorFlow's bookkeeping (the object graph), not variables.
        self.shapes = {k: v for k, v in self.reader.get_variable_to_shape_map().items() if k[:1] != "_"}
        self.dtypes = {
            k: tf.as_dtype(v) for k, v in self.reader.get_variable_to_dtype_map().items() if k in self.shapes
        }

    def unreadable(self, err: BaseException) -> ConfigError:
        """The ConfigError of a checkpoint TensorFlow cannot read."""
        text = getattr(err, "message", None) or str(err)
        return ConfigError(f"checkpoint {self.prefix} is unreadable: {error_summary(text)[:200]}")

    def tensor(self, key: str) -> np.ndarray:
        """The value saved under ``key``; ConfigError if it does not read back."""
        try:
            return self.reader.get_tensor(key)
        except (tf.errors.OpError, ValueError, RuntimeError, IndexError) as err:  # IndexError: truncated data
            raise self.unreadable(err) from None

    def global_step(self) -> int:
        """The checkpoint's ``global_step`` (0 without one)."""
        return int(self.tensor("global_step")) if "global_step" in self.shapes else 0

    def table_names(self, pattern: str) -> list[str]:
        """The tables ``pattern`` (a name or an fnmatch pattern) names: 2-d variables, whole or in parts."""
        candidates = {name for name, shape in self.shapes.items() if len(shape) == 2 and not _PART_KEY.search(name)}
        candidates |= {m["base"] for m in map(_PART.match, self.shapes) if m and m["base"] not in self.shapes}
        # A slot (``T/Adagrad``) is no table of its own.
        candidates = {name for name in candidates if not _is_slot(name, candidates)}
        found = sorted(name for name in candidates if fnmatch.fnmatchcase(name, pattern))
        if not found:
            tables = sorted(candidates)
            listed = ", ".join(tables[:8]) + (f" and {len(tables) - 8} more" if len(tables) > 8 else "")
            raise ConfigError(
                f"checkpoint {self.prefix} holds no embedding variable {pattern} "
                f"(nor its partitions {pattern}/part_N); its 2-d variables: {listed or 'none'}"
            )
        return found

    def read(self, name: str) -> tuple[np.ndarray, list[str]]:
        """(the whole 2-d table ``name``, the checkpoint keys it was read from); ConfigError if it is no table."""
        if name in self.shapes:
            keys = [name]
        else:
            parts = sorted(
                ((int(m["index"]), key) for key in self.shapes if (m := _PART.match(key)) and m["base"] == name),
                key=lambda part: part[0],
            )
            if not parts:
                raise ConfigError(f"checkpoint {self.prefix} holds no variable {name} (nor {name}/part_N)")
            if [index for index, _ in parts] != list(range(len(parts))):
                raise ConfigError(
                    f"checkpoint {self.prefix}: the partitions of {name} are not part_0 .. part_{len(parts) - 1}"
                )
            keys = [key for _, key in parts]
        for key in keys:
            dtype = self.dtypes[key]
            if len(self.shapes[key]) != 2:
                raise ConfigError(
                    f"checkpoint {self.prefix}: {key} is {self.shapes[key]}, not an embedding table [rows, dim]"
                )
            if not dtype.is_floating:
                raise ConfigError(
                    f"checkpoint {self.prefix}: {key} holds {dtype.name} values; an embedding table holds floats"
                )
        dims = {self.shapes[key][1] for key in keys}
        if len(dims) != 1:
            raise ConfigError(f"checkpoint {self.prefix}: the partitions of {name} have dims {sorted(dims)}")
        return np.concatenate([self.tensor(key) for key in keys]), keys

    def slot_keys(self, name: str, suffix: str) -> str | None:
        """The name the checkpoint holds slot ``suffix`` of table ``name`` under (whole or in parts), or None."""
        slot = f"{name}/{suffix}"
        if slot in self.shapes or f"{name}/part_0/{suffix}" in self.shapes:
            return slot
        return None

    def read_slot(self, name: str, suffix: str) -> tuple[np.ndarray, list[str]]:
        """(slot ``suffix`` of table ``name``, whole, the keys read): ``name/suffix``, or ``name/part_i/suffix``."""
        slot = f"{name}/{suffix}"
        if slot in self.shapes:
            return self.read(slot)
        parts, index = [], 0
        while f"{name}/part_{index}/{suffix}" in self.shapes:
            parts.append(f"{name}/part_{index}/{suffix}")
            index += 1
        values = [self.read(part)[0] for part in parts]
        return np.concatenate(values), parts

    def detect_optimizer(self, names: list[str]) -> str:
        """The optimizer whose slots the checkpoint holds beside ``names`` (``sgd`` when none)."""
        found = [
            optimizer
            for optimizer, slots in OPTIMIZER_SLOTS.items()
            if slots and all(self.slot_keys(names[0], suffix) for suffix, _ in slots)
        ]
        # RMSProp's slots are centered RMSProp's first two: the one with the most slots found is the one.
        return max(found, key=lambda optimizer: len(OPTIMIZER_SLOTS[optimizer])) if found else "sgd"


def _is_slot(name: str, tables: set) -> bool:
    """Whether ``name`` is an optimizer's slot of one of ``tables`` (a table, then a TF1 slot name)."""
    parent, _, last = name.rpartition("/")
    return parent in tables and any(last == suffix for slots in OPTIMIZER_SLOTS.values() for suffix, _ in slots)
