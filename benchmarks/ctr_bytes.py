"""What a ctr step must move: the distinct rows its batch touches (pulled and pushed) and the dense part.

Computed from the id law, not from samples: a batch of ``b`` ids drawn from
probabilities ``p`` over ``n`` ids touches ``sum_i 1 - (1 - p_i)^b`` distinct
ids on average. The fields' ids are drawn independently and never collide
(a table each, or offsets in a shared table), so a step touches 26 times that.
No TensorFlow here: the benchmark's harness computes it.
"""

from __future__ import annotations

import functools

import numpy as np

FIELDS, DENSE_FEATURES = 26, 13  # benchmarks.ctr_data's
HIDDEN_UNITS = (64, 32)  # benchmarks.ctr_model's
_EXPONENTS = {"uniform": None, "zipf1.05": 1.05, "zipf1.2": 1.2}


@functools.lru_cache(maxsize=16)
def distinct_per_field(law: str, vocab: int, batch_size: int) -> float:
    """Expected distinct ids in one field of a batch."""
    exponent = _EXPONENTS[law]
    if exponent is None:
        return vocab * -np.expm1(batch_size * np.log1p(-1.0 / vocab))
    weights = np.arange(1, vocab + 1, dtype=np.float64) ** -exponent
    p = weights / weights.sum()
    return float(np.sum(-np.expm1(batch_size * np.log1p(-p))))


def dense_parameters(dim: int) -> int:
    sizes = (FIELDS * dim + DENSE_FEATURES, *HIDDEN_UNITS, 1)
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:], strict=True))


def needed_bytes_per_step(law: str, vocab: int, dim: int, batch_size: int) -> dict:
    """float32 bytes a step needs: each distinct row pulled and its gradient pushed, the MLP likewise."""
    distinct = FIELDS * distinct_per_field(law, vocab, batch_size)
    rows = 2 * 4 * dim * distinct
    dense = 2 * 4 * dense_parameters(dim)
    return {
        "unique_rows_per_step": round(distinct, 1),
        "unique_row_bytes_per_step": round(rows),
        "dense_bytes_per_step": dense,
        "needed_bytes_per_step": round(rows + dense),
        "lookups_per_step": FIELDS * batch_size,
    }
