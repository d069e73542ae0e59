"""A TFRA script's model_dir written by real TFRA, restored here and trained on (run under run_legacy.py).

    python scripts/run_legacy.py tests/fixtures_legacy/tfra_restore.py --model_dir=COPY --shards=3 --steps=20

Builds tests/fixtures/tfra_checkpoints/tfra_model.py's graph with its tables in --shards local shards,
opens a MonitoredTrainingSession on --model_dir (which restores its checkpoint), compares every
table's rows and Adam slots with the checkpoint's TFRA shards (read by TensorFlow's checkpoint
reader), trains --steps more steps on the model's batches, and prints one JSON line
(``tfra_restore``): the step restored, the comparison, the losses.
--user_dim / --user_key_dtype build another model (a checkpoint that does not fit it).
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf
import tensorflow_recommenders_addons as tfra

from ps_toolkit_compat.tfra import checkpoint_import

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tfra_checkpoints"))
import tfra_model  # noqa: E402

flags = tf.app.flags
flags.DEFINE_string("model_dir", None, "the TFRA model_dir (a copy: the session may save into it)")
flags.DEFINE_integer("shards", 2, "shards of each table (local devices)")
flags.DEFINE_integer("steps", 20, "steps trained after the restore")
flags.DEFINE_integer("user_dim", tfra_model.DIM, "the user table's dim")
flags.DEFINE_string("user_key_dtype", "int64", "the user table's key dtype")
flags.DEFINE_string("write_tableless", None, "only write --model_dir's checkpoint less its tables into this folder")
flags.DEFINE_boolean("dense_saver", False, "only restore the dense tower with a Saver of its variables")
FLAGS = flags.FLAGS


def _by_id(ids, values):
    return {(i.decode() if isinstance(i, bytes) else int(i)): np.asarray(v) for i, v in zip(ids, values, strict=True)}


def _saved(reader, shards):
    ids = np.concatenate([reader.get_tensor(key) for key in shards.keys])
    values = np.concatenate([reader.get_tensor(key) for key in shards.values])
    return _by_id(ids, values)


def _compare(restored, saved):
    same_ids = sorted(restored) == sorted(saved)
    diff = max((float(np.max(np.abs(restored[i] - saved[i]))) for i in saved if i in restored), default=None)
    return {"ids": len(restored), "saved_ids": len(saved), "same_ids": same_ids, "max_abs_diff": diff}


def write_tableless(model_dir, out):
    """--model_dir's checkpoint with its variables only (a checkpoint that holds no table), into ``out``."""
    prefix = tf.train.latest_checkpoint(model_dir)
    reader = tf.compat.v1.train.NewCheckpointReader(prefix)
    tables = checkpoint_import.tfra_tables(reader.get_variable_to_shape_map())
    table_keys = {key for shards in tables.values() for key in shards.keys + shards.values}
    with tf.Graph().as_default():
        variables = [
            tf.compat.v1.Variable(reader.get_tensor(name), name=name)
            for name in sorted(reader.get_variable_to_shape_map())
            if name not in table_keys
        ]
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.variables_initializer(variables))
            tf.compat.v1.train.Saver(variables).save(session, os.path.join(out, os.path.basename(prefix)))


def restore_dense(model_dir):
    """A Saver of the dense variables alone restores them as TensorFlow does, though the graph has tables."""
    dense = [v for v in tf.compat.v1.global_variables() if v.op.name.startswith("tower_")]
    saver = tf.compat.v1.train.Saver(var_list=dense)
    with tf.compat.v1.Session() as session:
        saver.restore(session, tf.train.latest_checkpoint(model_dir))
        values = session.run(dense)
    reader = tf.compat.v1.train.NewCheckpointReader(tf.train.latest_checkpoint(model_dir))
    same = all(np.array_equal(value, reader.get_tensor(v.op.name)) for v, value in zip(dense, values, strict=True))
    print("tfra_restore " + json.dumps({"dense_restored": len(dense), "same": same}))


def main(_):
    if FLAGS.write_tableless:
        write_tableless(FLAGS.model_dir, FLAGS.write_tableless)
        return
    model = tfra_model.build(
        tfra, ["/CPU:0"] * FLAGS.shards, user_dim=FLAGS.user_dim, user_key_dtype=tf.as_dtype(FLAGS.user_key_dtype)
    )
    if FLAGS.dense_saver:
        restore_dense(FLAGS.model_dir)
        return
    exports = {}
    for table in model["tables"]:
        exports[table.name] = table.export()
        for slot in checkpoint_import.slot_names(table.table):
            exports[f"{table.name}:{slot}"] = checkpoint_import.export_slot(table.table, slot)
    step = tf.compat.v1.train.get_global_step()
    reader = tf.compat.v1.train.NewCheckpointReader(tf.train.latest_checkpoint(FLAGS.model_dir))
    found = checkpoint_import.tfra_tables(reader.get_variable_to_shape_map())
    with tf.compat.v1.train.MonitoredTrainingSession(
        checkpoint_dir=FLAGS.model_dir,
        save_checkpoint_secs=None,
        save_checkpoint_steps=None,
        save_summaries_steps=None,
        save_summaries_secs=None,
        log_step_count_steps=None,
    ) as session:
        restored_step = int(session.run(step))
        compared = {}
        for name, export in exports.items():
            table, _, slot = name.partition(":")
            source = found[f"{table}_Adam_{slot}" if slot else table]
            compared[name] = _compare(_by_id(*session.run(export)), _saved(reader, source))
        losses = []
        for i in range(FLAGS.steps):
            _, loss = session.run([model["train"], model["loss"]], feed_dict=tfra_model.feed(model, restored_step + i))
            losses.append(float(loss))
        final_step = int(session.run(step))
    print(
        "tfra_restore "
        + json.dumps({"restored_step": restored_step, "final_step": final_step, "compared": compared, "losses": losses})
    )


if __name__ == "__main__":
    tf.app.run(main)
