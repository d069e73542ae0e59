"""A local stand-in for tensorflow_datasets, for the TFRA demo in this folder: nothing downloads at test time.

``load("movielens/100k-ratings", split="train")`` gives the rows the real dataset gives the demo (movie_id and
user_id as strings, user_rating as float32), made up here: 1,024 ratings of 200 movies by 100 users, the same
on every call (four of the demo's batches of 256). Any other dataset or split is refused in one line.
"""

import numpy as np
import tensorflow as tf

ROWS, MOVIES, USERS = 1024, 200, 100


def load(name, split=None, **_):
    if name != "movielens/100k-ratings" or split != "train":
        raise ValueError(f"tensorflow_datasets stand-in (tests/corpus): no dataset {name!r} split {split!r}")
    rng = np.random.default_rng(2021)
    movies = rng.integers(1, MOVIES + 1, ROWS)
    users = rng.integers(1, USERS + 1, ROWS)
    # A rating that depends on the ids, so that there is something to learn.
    ratings = (1 + (movies * 7 + users * 3) % 5).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices(
        {
            "movie_id": [str(m) for m in movies],
            "user_id": [str(u) for u in users],
            "user_rating": ratings,
        }
    )
