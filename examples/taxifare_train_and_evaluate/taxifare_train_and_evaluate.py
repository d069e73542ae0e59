"""Seed 000's notebook code: a canned LinearRegressor, RunConfig, TrainSpec/EvalSpec, tf.estimator.train_and_evaluate.

Run it from an empty folder (it reads ./train.csv-* and ./valid.csv and writes ./trained_model, as the notebook did):

    mkdir -p /tmp/taxifare && cd /tmp/taxifare
    python REPO/scripts/launch_local.py --chief --num_workers=1 --num_ps=1 --evaluator --grace_secs=30 \
        --ps_grace_secs=30 -- python REPO/scripts/run_legacy.py \
        REPO/examples/taxifare_train_and_evaluate/taxifare_train_and_evaluate.py

or ``python REPO/scripts/run_legacy.py REPO/examples/taxifare_train_and_evaluate/taxifare_train_and_evaluate.py``
alone (local training, as in the notebook).

The notebook's cells are below unchanged and in their order, except one typo
fixed (``flat_mapla`` is ``flat_map``); its data-shuffling cell is the
training input_fn. The notebook took its data, ``feat_cols`` and the input
functions from earlier lessons; they are defined first: a small synthetic
taxi-fare data set (12,000 New York trips, fare = $2.50 + $1.75 per km along
the street grid + noise), written to the current folder when missing. With
``.repeat(15)`` the training input runs out after 15 epochs, long before the
notebook's max_steps=50000: training ends there, and the evaluator ends after
evaluating the last checkpoint.
"""

import os

import numpy as np
import tensorflow as tf

# --- What the notebook's earlier lessons provided: the data, decode_csv, feat_cols and the input functions.
CSV_COLUMNS = ["fare_amount", "pickuplon", "pickuplat", "dropofflon", "dropofflat", "passengers", "key"]
DEFAULTS = [[0.0], [-74.0], [40.0], [-74.0], [40.7], [1.0], ["nokey"]]
KM_PER_DEGREE = (84.2, 111.2)  # longitude, latitude at New York


def write_data_set(folder: str = ".") -> None:
    """train.csv-00000-of-00002, train.csv-00001-of-00002 (5,000 trips each) and valid.csv (2,000), once."""
    rng = np.random.RandomState(2018)
    files = {"train.csv-00000-of-00002": 5000, "train.csv-00001-of-00002": 5000, "valid.csv": 2000}
    for name, count in files.items():
        path = os.path.join(folder, name)
        if os.path.exists(path):
            continue
        pickup_lon = rng.uniform(-74.02, -73.93, count)
        pickup_lat = rng.uniform(40.70, 40.80, count)
        dropoff_lon = pickup_lon + rng.uniform(0.0, 0.06, count)
        dropoff_lat = pickup_lat + rng.uniform(0.0, 0.06, count)
        km = (dropoff_lon - pickup_lon) * KM_PER_DEGREE[0] + (dropoff_lat - pickup_lat) * KM_PER_DEGREE[1]
        fare = 2.5 + 1.75 * km + rng.normal(0.0, 1.0, count)
        passengers = rng.randint(1, 5, count)
        rows = [
            f"{fare[i]:.2f},{pickup_lon[i]:.6f},{pickup_lat[i]:.6f},{dropoff_lon[i]:.6f},{dropoff_lat[i]:.6f},"
            f"{passengers[i]},{name}-{i}"
            for i in range(count)
        ]
        temporary = f"{path}.{os.getpid()}.tmp"  # every task may write it; each writes the same bytes
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write("\n".join(rows) + "\n")
        os.replace(temporary, path)


def decode_csv(line):
    columns = tf.decode_csv(line, record_defaults=DEFAULTS)
    features = dict(zip(CSV_COLUMNS, columns, strict=True))
    features.pop("key")
    label = features.pop("fare_amount")
    return features, label


# Coordinates centred on Manhattan and scaled to about +-1: raw longitudes near -74 that vary by 0.1 leave the
# linear model's default FTRL optimizer nowhere to go (measured: no better than predicting the mean fare).
CENTRES = {"pickuplon": (-73.95, 0.05), "pickuplat": (40.77, 0.05), "dropofflon": (-73.95, 0.05),
           "dropofflat": (40.77, 0.05), "passengers": (2.5, 1.5)}  # fmt: skip
feat_cols = [
    tf.feature_column.numeric_column(name, normalizer_fn=lambda x, c=centre, s=scale: (x - c) / s)
    for name, (centre, scale) in CENTRES.items()
]


def train_input_fn():
    # The notebook's shuffling cell, as the training input.
    dataset = tf.data.Dataset.list_files("train.csv-*") \
                             .shuffle(100) \
                             .flat_map(tf.data.TextLineDataset) \
                             .map(decode_csv)  # fmt: skip

    dataset = dataset.shuffle(1000) \
                     .repeat(15) \
                     .batch(128)  # fmt: skip
    return dataset


def eval_input_fn():
    return tf.data.TextLineDataset("valid.csv").map(decode_csv).batch(128)


write_data_set()

# --- The notebook, In [2] onwards.
OUTPUT_DIR = "./trained_model"
run_config = tf.estimator.RunConfig(
    model_dir=OUTPUT_DIR,
    save_summary_steps=100,
    save_checkpoints_steps=2000 # After every 2000 steps our model will save weights and biases.
)  # fmt: skip

estimator = tf.estimator.LinearRegressor(
    feature_columns=feat_cols,
    config=run_config)  # fmt: skip

train_spec = tf.estimator.TrainSpec(input_fn=train_input_fn, max_steps=50000)

eval_spec = tf.estimator.EvalSpec(
    input_fn=eval_input_fn,
    steps=100, # We want to evaluate 100 batches of test data
    throttle_secs=600, # 10 Minutes (We want to run our evaluation on every 10 minutes)
    exporters=None
)  # fmt: skip

tf.estimator.train_and_evaluate(
    estimator=estimator,
    train_spec=train_spec,
    eval_spec=eval_spec
)  # fmt: skip
