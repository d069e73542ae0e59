"""How a fixed table's ids found their rows, and which ids a conversion writes: identity, modulo, hash, vocabulary.

A fixed (TF1 ``get_variable``) embedding table is looked up by row number;
the model turned each id into a row one of four ways:

- the identity: the id is the row (ids 0 .. rows - 1);
- modulo buckets: row ``id % rows`` (TensorFlow's floormod, never negative).
  The table does not say which ids used a bucket, so the user names them (a
  file of ids or a range); every id of a bucket gets that bucket's row;
- hash buckets: row ``tf.strings.to_hash_bucket_fast(id, rows)`` of a string
  id, or of an integer id's decimal string, as
  ``categorical_column_with_hash_bucket`` hashes them; the user names the
  ids, as for modulo buckets;
- a vocabulary file: one token per line, the row is the line number (string
  ids), as ``tf.lookup.index_table_from_file`` reads it (a trailing ``\\r`` is
  no part of the token); rows past the last line are out-of-vocabulary
  buckets, whose ids are unknown and which are not written.

A partitioned table's row numbers are the lookup's: ``div`` (contiguous rows
per part, the toolkit's ``embedding_lookups`` and the feature columns') is the
saved table's own order; ``mod`` (``tf.compat.v1.nn.embedding_lookup``'s
default) keeps row r in part ``r % parts`` at ``r // parts``, so the saved
table's order is another (``stored_rows``).
"""

from __future__ import annotations

import dataclasses
import os
import re

import numpy as np
import tensorflow as tf

from ps_toolkit.base.errors import ConfigError

KINDS = ("identity", "modulo", "hash", "vocabulary")
# The mappings whose ids the user names: the table does not say which ids used a bucket.
BUCKETED = ("modulo", "hash")
PARTITION_STRATEGIES = ("div", "mod")
_RANGE = re.compile(r"^(-?\d+):(-?\d+)$")
MAX_RANGE = 10**9  # the most ids of one --ids=A:B: as many already take tens of GB of arrays to convert


@dataclasses.dataclass(frozen=True)
class IdMapping:
    """An id -> row mapping and the ids to write (see the module's docstring).

    Made by ``identity``, ``modulo``, ``hash_buckets`` or ``vocabulary``. ``ids`` (int64, or
    bytes for hashed string ids) are the ids to write (None: every row's, for the identity),
    ``source`` says where they came from.
    """

    kind: str
    ids: np.ndarray | None = None
    source: str = ""
    vocabulary: str | None = None
    num_oov_buckets: int = 0


@dataclasses.dataclass(frozen=True)
class Placement:
    """The ids a table's rows go to: ``ids[i]`` gets fixed row ``rows[i]``.

    ``key_dtype``: "int64" or "string" (ids are then bytes). ``shared_ids``: how many
    ids shared their row with another id; ``shared_rows``: how many rows more than one id
    got; ``most_per_row``: the most ids one row got; ``repeated``: ids given more than once
    (written once).
    """

    ids: np.ndarray
    rows: np.ndarray
    key_dtype: str
    shared_ids: int = 0
    shared_rows: int = 0
    most_per_row: int = 1
    repeated: int = 0


def identity(ids: np.ndarray | None = None, source: str = "") -> IdMapping:
    """The id is the row: every row (or only ``ids``) is written under its row number."""
    return IdMapping("identity", _int_ids(ids), source)


def modulo(ids: np.ndarray, source: str = "") -> IdMapping:
    """Row ``id % rows``: each of ``ids`` gets its bucket's row."""
    return IdMapping("modulo", _int_ids(ids), source)


def hash_buckets(ids, source: str = "") -> IdMapping:
    """Row ``to_hash_bucket_fast(id, rows)``: ``ids`` are int64 (hashed as decimal strings) or strings."""
    values = np.asarray(ids)
    if values.dtype.kind in "OSU":
        tokens = [value.encode("utf-8") if isinstance(value, str) else bytes(value) for value in values.tolist()]
        return IdMapping("hash", np.array(tokens, dtype=object), source)
    return IdMapping("hash", _int_ids(ids), source)


def vocabulary(path: str, num_oov_buckets: int = 0) -> IdMapping:
    """Line n of the file at ``path`` is the token of row n; ``num_oov_buckets`` rows follow the last line."""
    if num_oov_buckets < 0:
        raise ConfigError(f"num_oov_buckets={num_oov_buckets} must not be negative")
    return IdMapping("vocabulary", vocabulary=path, num_oov_buckets=num_oov_buckets)


def is_range(spec: str) -> bool:
    """Whether ``spec`` is a range ``A:B`` of ids (else a file's path)."""
    return bool(_RANGE.match(spec.strip()))


def read_ids(spec: str, flag: str = "--ids") -> tuple[np.ndarray, str]:
    """(int64 ids, their source) of ``spec``: ``A:B`` (the ids A .. B - 1), else a file of one id per line."""
    match = _RANGE.match(spec.strip())
    if match:
        start, stop = int(match[1]), int(match[2])
        if stop <= start:
            raise ConfigError(f"{flag}={spec}: the range A:B holds no id (B must be above A)")
        if stop - start > MAX_RANGE:
            raise ConfigError(
                f"{flag}={spec}: {stop - start} ids, more than one conversion writes ({MAX_RANGE}); "
                "give a file of the ids the model saw"
            )
        return np.arange(start, stop, dtype=np.int64), f"{flag}={spec}"
    if not os.path.isfile(spec):
        raise ConfigError(f"{flag}={spec}: neither a range A:B nor a file of ids")
    ids = []
    try:
        with open(spec, encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                text = line.strip()
                if not text:
                    continue
                try:
                    ids.append(int(text))
                except ValueError:
                    raise ConfigError(
                        f"{flag} file {spec}, line {number}: {text[:40]!r} is not an integer id"
                    ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{flag} file {spec}: {getattr(err, 'strerror', None) or err}") from None
    if not ids:
        raise ConfigError(f"{flag} file {spec} holds no id")
    try:
        return np.array(ids, dtype=np.int64), f"{flag} file {spec}"
    except OverflowError:
        raise ConfigError(f"{flag} file {spec}: an id does not fit in int64") from None


def place(mapping: IdMapping, num_rows: int, table: str) -> Placement:
    """Where ``mapping`` puts the ids of fixed table ``table`` (of ``num_rows`` rows); ConfigError naming a misfit."""
    if mapping.kind == "vocabulary":
        return _vocabulary_placement(mapping, num_rows, table)
    if mapping.kind not in KINDS:
        raise ConfigError(f"table {table}: id mapping {mapping.kind!r} is not one of {', '.join(KINDS)}")
    if mapping.ids is None:
        if mapping.kind in BUCKETED:
            raise ConfigError(
                f"table {table}: {mapping.kind} buckets need the ids to write (a file of ids or a range A:B)"
            )
        rows = np.arange(num_rows, dtype=np.int64)
        return Placement(rows, rows, "int64")
    ids = np.unique(mapping.ids)
    repeated = len(mapping.ids) - len(ids)
    if mapping.kind == "identity":
        outside = ids[(ids < 0) | (ids >= num_rows)]
        if len(outside):
            raise ConfigError(
                f"table {table} has {num_rows} rows: id {outside[0]} ({mapping.source}) is no row of the identity"
            )
        return Placement(ids, ids, "int64", repeated=repeated)
    key_dtype = "string" if ids.dtype == object else "int64"
    rows = np.mod(ids, num_rows) if mapping.kind == "modulo" else _hash_rows(ids, num_rows)
    per_row = np.bincount(rows, minlength=num_rows)
    shared = per_row > 1
    return Placement(
        ids,
        rows,
        key_dtype,
        shared_ids=int(per_row[shared].sum()),
        shared_rows=int(shared.sum()),
        most_per_row=int(per_row.max()),
        repeated=repeated,
    )


def _hash_rows(ids: np.ndarray, num_rows: int) -> np.ndarray:
    """``to_hash_bucket_fast`` of each id (an integer's decimal string), as the hash-bucket feature columns."""
    with tf.Graph().as_default() as graph:
        fed = tf.compat.v1.placeholder(tf.string if ids.dtype == object else tf.int64, [None])
        text = fed if fed.dtype == tf.string else tf.strings.as_string(fed)
        rows = tf.strings.to_hash_bucket_fast(text, num_rows)
        with tf.compat.v1.Session(graph=graph) as session:
            return session.run(rows, {fed: ids})


def read_tokens(path: str, flag: str = "--ids") -> tuple[np.ndarray, str]:
    """(the string ids of a file, one per line, as bytes; their source); empty lines are skipped."""
    try:
        with open(path, "rb") as file:
            lines = file.read().split(b"\n")
    except OSError as err:
        raise ConfigError(f"{flag} file {path}: {err.strerror}") from None
    tokens = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    tokens = [token for token in tokens if token]
    if not tokens:
        raise ConfigError(f"{flag} file {path} holds no id")
    return np.array(tokens, dtype=object), f"{flag} file {path}"


def stored_rows(rows: np.ndarray, num_rows: int, strategy: str, part_sizes: list[int], table: str) -> np.ndarray:
    """Where the saved table (its parts one after the other) holds the lookup's ``rows`` under ``strategy``.

    Args:
        rows: Row numbers as the lookup saw them.
        num_rows: The table's rows.
        strategy: "div" or "mod" (the lookup's ``partition_strategy``).
        part_sizes: The rows of each part, in order (one part: ``[num_rows]``).
        table: The table's name, for messages.
    """
    if strategy not in PARTITION_STRATEGIES:
        raise ConfigError(f"table {table}: partition strategy {strategy!r} is not one of div, mod")
    parts = len(part_sizes)
    if strategy == "div" or parts == 1:
        return rows
    # TensorFlow splits num_rows rows into parts, the first num_rows % parts of them one row longer.
    expected = [num_rows // parts + (1 if p < num_rows % parts else 0) for p in range(parts)]
    if list(part_sizes) != expected:
        raise ConfigError(
            f"table {table}: parts of {list(part_sizes)} rows are not how TensorFlow splits {num_rows} rows "
            f"into {parts} ({expected}); the mod strategy cannot have read them"
        )
    starts = np.concatenate([[0], np.cumsum(expected)[:-1]]).astype(np.int64)
    return starts[rows % parts] + rows // parts


def _vocabulary_placement(mapping: IdMapping, num_rows: int, table: str) -> Placement:
    path = mapping.vocabulary
    tokens = read_vocabulary(path)
    expected = len(tokens) + mapping.num_oov_buckets
    if expected != num_rows:
        oov = f" + {mapping.num_oov_buckets} out-of-vocabulary buckets" if mapping.num_oov_buckets else ""
        raise ConfigError(
            f"vocabulary file {path} has {len(tokens)} lines{oov}, but table {table} has {num_rows} rows: "
            "it is not the vocabulary this table was trained with"
        )
    return Placement(np.array(tokens, dtype=object), np.arange(len(tokens), dtype=np.int64), "string")


def read_vocabulary(path: str) -> list[bytes]:
    """The tokens of a vocabulary file, one per line (``\\n`` or ``\\r\\n``); ConfigError on a repeated token."""
    try:
        with open(path, "rb") as file:
            content = file.read()
    except OSError as err:
        raise ConfigError(f"vocabulary file {path}: {err.strerror}") from None
    tokens = content.split(b"\n")
    if tokens and tokens[-1] == b"":  # the newline ending the last line starts no line of its own
        tokens.pop()
    tokens = [token[:-1] if token.endswith(b"\r") else token for token in tokens]
    seen = {}
    for number, token in enumerate(tokens, 1):
        if token in seen:
            raise ConfigError(
                f"vocabulary file {path}: line {number} repeats line {seen[token]}'s token {token[:40]!r} "
                "(a token has one row)"
            )
        seen[token] = number
    return tokens


def _int_ids(ids) -> np.ndarray | None:
    if ids is None:
        return None
    ids = np.asarray(ids)
    if ids.dtype.kind not in "iu" or ids.ndim != 1:
        raise ConfigError(f"ids must be a list of integers, not an array of {ids.dtype} {list(ids.shape)}")
    return ids.astype(np.int64)
