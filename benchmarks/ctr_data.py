"""The Criteo-shaped benchmark data: 26 categorical fields, 13 dense features, labels from a hidden logistic model.

Every batch is made in the input pipeline from stateless random ops, so a
(seed, batch index) pair always gives the same examples, in every system and
process. Ids follow one of ``ID_LAWS`` over ``VOCAB`` ids per field: uniform,
or Zipf with exponent s (rank r drawn with probability proportional to r^-s).
A rank becomes an id through a fixed permutation per field, so the hot ids
are spread over the table's row range (as hashed ids are) and over the ps
tasks that hold its parts. A label is 1 with probability sigmoid(hidden
score): the sum of a hidden weight per (field, id) and a hidden linear
function of the dense features, so AUC says how much of it a model learned.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

FIELDS, DENSE_FEATURES = 26, 13
ID_LAWS = {"uniform": None, "zipf1.05": 1.05, "zipf1.2": 1.2}
# The evaluation set: its own seed, the same id law as training.
EVAL_SEED, EVAL_BATCHES = 1_000_003, 16
_HIDDEN_SIZE = 1 << 20
_PERMUTE = 999_983  # prime, so coprime with any VOCAB of only 2s and 5s: rank -> id is a permutation
_SPARSE_SCALE, _DENSE_SCALE = 2.0, 1.0


@dataclasses.dataclass(frozen=True)
class CtrShape:
    """The model's sizes: ``vocab`` ids per field, ``dim``-wide embeddings, ``batch_size`` examples per step."""

    vocab: int = 1_000_000
    dim: int = 8
    batch_size: int = 512

    @property
    def table_bytes(self) -> int:
        """float32 bytes of all the fields' embedding rows together."""
        return FIELDS * self.vocab * self.dim * 4


def law_exponent(law: str) -> float | None:
    if law not in ID_LAWS:
        raise ValueError(f"unknown id law {law!r}; valid: {', '.join(ID_LAWS)}")
    return ID_LAWS[law]


def _lookup_tables(exponent: float | None, vocab: int) -> dict:
    """The tables every batch reads: the Zipf CDF over ranks (when the law is Zipf) and the hidden weights.

    Made by ops, once per iterator (``dataset`` caches them), never as constants:
    12 MB of constants in the data's function would be copied by every graph
    build and optimization of a graph holding it (a session's first run, an
    evaluation's graph built during training), inside the runs being timed.
    """
    tables = {"hidden": tf.random.stateless_normal([_HIDDEN_SIZE], seed=[7, 0])}
    if exponent is not None:
        weights = tf.range(1, vocab + 1, dtype=tf.float64) ** -exponent
        cumulative = tf.cumsum(weights)  # sequential: the same sums with any thread count
        tables["cdf"] = cumulative / cumulative[-1]
    return tables


def _dense_weights() -> np.ndarray:
    return (np.random.default_rng(8).normal(size=DENSE_FEATURES) / np.sqrt(DENSE_FEATURES)).astype(np.float32)


def make_batch(seed, index, law: str, shape: CtrShape, tables: dict | None = None):
    """(features {"ids": int64 [batch, FIELDS], "dense": float32 [batch, DENSE_FEATURES]}, labels int64 [batch]).

    ``tables``: ``_lookup_tables(law's exponent, shape.vocab)``, made here when not given.
    """
    exponent = law_exponent(law)
    tables = tables if tables is not None else _lookup_tables(exponent, shape.vocab)
    seeds = tf.stack([tf.cast(seed, tf.int64), tf.cast(index, tf.int64)])
    size = [shape.batch_size, FIELDS]
    draw = tf.random.stateless_uniform(size, seed=seeds, dtype=tf.float64)
    if exponent is None:
        ranks = tf.cast(draw * shape.vocab, tf.int64)
    else:
        ranks = tf.searchsorted(tables["cdf"], tf.reshape(draw, [-1]), side="right")
        ranks = tf.reshape(tf.cast(ranks, tf.int64), size)
    ranks = tf.minimum(ranks, shape.vocab - 1)
    fields = tf.range(FIELDS, dtype=tf.int64)
    ids = (ranks * _PERMUTE + fields * 7_919) % shape.vocab
    dense = tf.random.stateless_normal([shape.batch_size, DENSE_FEATURES], seed=seeds + [0, 1 << 40])
    hidden_index = (ids * 40_503 + fields * 1_000_003) % _HIDDEN_SIZE
    sparse_score = tf.reduce_sum(tf.gather(tables["hidden"], hidden_index), axis=1)
    score = _SPARSE_SCALE * sparse_score / np.sqrt(FIELDS) + _DENSE_SCALE * tf.linalg.matvec(dense, _dense_weights())
    coin = tf.random.stateless_uniform([shape.batch_size], seed=seeds + [0, 2 << 40])
    labels = tf.cast(coin < tf.sigmoid(score), tf.int64)
    return {"ids": ids, "dense": dense}, labels


def dataset(seed: int, law: str, shape: CtrShape, batches: int | None = None) -> tf.data.Dataset:
    """``make_batch(seed, 0, ...)``, ``make_batch(seed, 1, ...)``...; endless when ``batches`` is None."""
    exponent = law_exponent(law)
    indices = tf.data.Dataset.range(batches) if batches is not None else tf.data.Dataset.range(1 << 62)
    # The lookup tables, made once and cached, handed to every batch beside its index.
    tables = tf.data.Dataset.from_tensors(0).map(lambda _: _lookup_tables(exponent, shape.vocab)).cache().repeat()
    return (
        tf.data.Dataset.zip((indices, tables))
        .map(lambda i, t: make_batch(seed, i, law, shape, t), num_parallel_calls=1)
        .prefetch(2)
    )


def eval_dataset(law: str, shape: CtrShape) -> tf.data.Dataset:
    return dataset(EVAL_SEED, law, shape, batches=EVAL_BATCHES)


def eval_arrays(law: str, shape: CtrShape) -> tuple[dict, np.ndarray]:
    """The evaluation set as numpy arrays (made in a graph of its own, so any mode of TensorFlow can call it)."""
    with tf.Graph().as_default():
        features, labels = tf.compat.v1.data.make_one_shot_iterator(
            eval_dataset(law, shape).batch(EVAL_BATCHES).map(_merge_batches)
        ).get_next()
        with tf.compat.v1.Session() as session:
            return session.run((features, labels))


def _merge_batches(features, labels):
    merge = lambda t: tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0))  # noqa: E731
    return {k: merge(v) for k, v in features.items()}, merge(labels)


def unique_rows(ids: np.ndarray, shared_table: bool) -> int:
    """Distinct rows a batch of ids [batch, FIELDS] touches: per field, or in one table shared by the fields."""
    if shared_table:
        return len(np.unique(ids + np.arange(FIELDS, dtype=np.int64) * (int(ids.max()) + 1)))
    return sum(len(np.unique(ids[:, f])) for f in range(FIELDS))


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Exact ROC AUC (ties counted half), from ranks: the same figure for every system."""
    labels = np.asarray(labels).astype(bool)
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores), dtype=np.float64)
    sorted_scores = np.asarray(scores)[order]
    # Average ranks over ties.
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    average = first + (counts - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(average, counts)
    positives, negatives = labels.sum(), (~labels).sum()
    if positives == 0 or negatives == 0:
        return float("nan")
    return float((ranks[labels].sum() - positives * (positives + 1) / 2.0) / (positives * negatives))
