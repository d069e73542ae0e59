"""Fixed tables to dynamic tables: each id -> row mapping, partitions, renames, bad input, the command.

Small one-table checkpoints are converted and read back through a dynamic table: modulo and hash
buckets (against TensorFlow's own hash-bucket feature columns), vocabularies, the mod partition
strategy. Bad input is one ConfigError line naming the value, and nothing is written;
``ps-convert-embeddings`` exits 2 with that line. The ctr model's end to end:
tests/test_embedding_conversion.py.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from ps_toolkit import dynamic_embedding as de
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.dynamic_embedding import conversion, id_mappings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one_table_checkpoint(folder, values, name="emb", slot=None):
    """A checkpoint of one variable ``name`` (and its Adagrad slot ``slot``) and a global step."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        variable = tf.compat.v1.get_variable(name, initializer=tf.constant(values))
        made = [variable]
        if slot is not None:
            made.append(tf.compat.v1.get_variable(f"{name}/Adagrad", initializer=tf.constant(slot)))
        step = tf.compat.v1.train.get_or_create_global_step()
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(step.assign(3))
        return tf.compat.v1.train.Saver().save(session, os.path.join(folder, "model.ckpt"), global_step=3)


def restored_rows(prefix, name, ids, key_dtype=tf.int64):
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        table = de.get_table(name, dim=2, key_dtype=key_dtype)
        rows = de.lookup(table, tf.constant(ids, key_dtype))
        tf.compat.v1.train.get_or_create_global_step()
        tf.compat.v1.train.Saver().restore(session, prefix)
        return session.run(rows)


def test_modulo_buckets_give_each_id_its_buckets_row_and_say_how_many_shared(tmp_path):
    values = np.arange(20, dtype=np.float32).reshape(10, 2)
    one_table_checkpoint(str(tmp_path), values)
    mapping = id_mappings.modulo(np.concatenate([np.arange(-5, 25), [3, 3]]), "a test list")
    report = conversion.convert(str(tmp_path), str(tmp_path / "out"), [conversion.TableConversion("emb", mapping)])
    (table,) = report.tables
    # 30 distinct ids in 10 buckets: 3 ids per bucket (the two repeats of 3 written once).
    assert (table.placement.shared_ids, table.placement.shared_rows, table.placement.most_per_row) == (30, 10, 3)
    assert "30 ids shared a row with another id (10 rows shared, at most 3 ids in one row)" in table.line()
    assert "2 ids given more than once" in table.line()
    ids = [-5, -1, 0, 9, 13, 24]
    np.testing.assert_array_equal(restored_rows(report.prefix, "emb", ids), values[np.mod(ids, 10)])


def test_a_vocabulary_gives_each_token_its_line_and_the_table_string_keys(tmp_path):
    values = np.arange(8, dtype=np.float32).reshape(4, 2)
    one_table_checkpoint(str(tmp_path), values)
    vocab = tmp_path / "words.txt"
    vocab.write_bytes(b"apple\r\nbanana\ncherry\n")
    mapping = id_mappings.vocabulary(str(vocab), num_oov_buckets=1)
    spec = conversion.TableConversion("emb", mapping, dynamic="words", key_dtype="string")
    report = conversion.convert(str(tmp_path), str(tmp_path / "out"), [spec])
    assert "1 out-of-vocabulary rows not written" in report.tables[0].line()
    found = restored_rows(report.prefix, "words", [b"cherry", b"apple", b"banana"], tf.string)
    np.testing.assert_array_equal(found, values[[2, 0, 1]])


def test_renamed_dense_variables_and_the_global_step_come_across(tmp_path):
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        tf.compat.v1.get_variable("old/emb", initializer=tf.ones([3, 2]))
        tf.compat.v1.get_variable("old/dense/kernel", initializer=tf.fill([2, 1], 7.0))
        tf.compat.v1.train.get_or_create_global_step()
        session.run(tf.compat.v1.global_variables_initializer())
        prefix = tf.compat.v1.train.Saver().save(session, str(tmp_path / "model.ckpt"))
    report = conversion.convert(
        prefix,
        str(tmp_path / "out"),
        [conversion.TableConversion("old/emb", id_mappings.identity(), dynamic="new/emb")],
        rename=[("old", "new")],
    )
    assert dict(report.copied) == {"global_step": "global_step", "old/dense/kernel": "new/dense/kernel"}
    reader = tf.compat.v1.train.NewCheckpointReader(report.prefix)
    np.testing.assert_array_equal(reader.get_tensor("new/dense/kernel"), np.full([2, 1], 7.0))
    assert reader.has_tensor("new/emb/meta/bucket_00/keys")


def mod_partitioned_checkpoint(folder, saved):
    """A table of 10 rows in 3 parts, read by tf.compat.v1.nn.embedding_lookup (the mod strategy), one Adagrad
    step trained, saved ``whole`` (TF1's Saver) or as ``parts``: (prefix, its rows of ids 0..9, their slots)."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        table = tf.compat.v1.get_variable("emb", [10, 2], partitioner=tf.compat.v1.fixed_size_partitioner(3))
        looked_up = tf.compat.v1.nn.embedding_lookup(table, tf.range(10, dtype=tf.int64))
        optimizer = tf.compat.v1.train.AdagradOptimizer(0.1)
        step = tf.compat.v1.train.get_or_create_global_step()
        train = optimizer.minimize(tf.reduce_sum(looked_up * tf.reshape(tf.range(20.0), [10, 2]) ** 2), step)
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(train)
        slots = [optimizer.get_slot(part, "accumulator") for part in table]
        slot_rows = tf.compat.v1.nn.embedding_lookup(slots, tf.range(10, dtype=tf.int64))
        rows, slot_values = session.run([looked_up, slot_rows])
        var_list = None
        if saved == "parts":
            var_list = {v.op.name: v for v in [*table, *slots, step]}
        prefix = tf.compat.v1.train.Saver(var_list).save(session, os.path.join(folder, "model.ckpt"), global_step=1)
    return prefix, rows, slot_values


@pytest.mark.parametrize("saved", ["whole", "parts"])
def test_mod_partitioned_tables_give_each_id_the_row_its_lookup_read(tmp_path, saved):
    prefix, rows, slot_values = mod_partitioned_checkpoint(str(tmp_path), saved)
    partitions = 3 if saved == "whole" else None
    spec = conversion.TableConversion(
        "emb", id_mappings.identity(), partition_strategy="mod", num_partitions=partitions
    )
    report = conversion.convert(prefix, str(tmp_path / "out"), [spec])
    assert report.optimizer == "adagrad" and report.tables[0].slots == ("accumulator",)
    ids = list(range(10))
    np.testing.assert_array_equal(restored_rows(report.prefix, "emb", ids), rows)
    reader = tf.compat.v1.train.NewCheckpointReader(report.prefix)
    found = {}
    for bucket in range(de.NUM_SAVE_BUCKETS):
        keys = reader.get_tensor(f"emb/slot_accumulator/bucket_{bucket:02d}/keys")
        values = reader.get_tensor(f"emb/slot_accumulator/bucket_{bucket:02d}/values")
        found.update(zip(keys.tolist(), values.tolist(), strict=True))
    np.testing.assert_array_equal([found[i] for i in ids], slot_values)


def test_a_whole_saved_table_read_by_mod_needs_its_number_of_parts(tmp_path):
    prefix, _, _ = mod_partitioned_checkpoint(str(tmp_path), "whole")
    spec = conversion.TableConversion("emb", id_mappings.identity(), partition_strategy="mod")
    refused(tmp_path, [spec], "holds emb whole: the mod partition strategy needs its number of parts")


# --- bad input: one ConfigError line naming the value, nothing written ------------------------------------------


def refused(tmp_path, specs, match, **kwargs):
    output = tmp_path / "out"
    with pytest.raises(ConfigError, match=match) as raised:
        conversion.convert(str(tmp_path), str(output), specs, **kwargs)
    assert "\n" not in str(raised.value)
    assert not output.exists()


def test_a_checkpoint_without_the_table_is_refused(tmp_path):
    one_table_checkpoint(str(tmp_path), np.ones([4, 2], np.float32))
    spec = conversion.TableConversion("model/embeddings_*", id_mappings.identity())
    refused(tmp_path, [spec], r"holds no embedding variable model/embeddings_\* .*its 2-d variables: emb$")


def test_a_table_of_another_dim_is_refused(tmp_path):
    one_table_checkpoint(str(tmp_path), np.ones([4, 2], np.float32))
    spec = conversion.TableConversion("emb", id_mappings.identity(), dim=8)
    refused(tmp_path, [spec], "emb has rows of dim 2; the dynamic table emb has dim 8")


def test_another_key_dtype_is_refused(tmp_path):
    one_table_checkpoint(str(tmp_path), np.ones([4, 2], np.float32))
    spec = conversion.TableConversion("emb", id_mappings.identity(), key_dtype="string")
    refused(tmp_path, [spec], "dynamic table emb has string keys, but the identity mapping of emb gives int64 ids")


@pytest.mark.parametrize("lines", [3, 5])
def test_a_vocabulary_of_more_or_fewer_lines_than_rows_is_refused(tmp_path, lines):
    one_table_checkpoint(str(tmp_path), np.ones([4, 2], np.float32))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"w{i}\n" for i in range(lines)))
    spec = conversion.TableConversion("emb", id_mappings.vocabulary(str(vocab)))
    refused(tmp_path, [spec], f"vocabulary file .*vocab.txt has {lines} lines, but table emb has 4 rows")


def test_slots_of_another_optimizer_are_refused(tmp_path):
    one_table_checkpoint(str(tmp_path), np.ones([4, 2], np.float32), slot=np.ones([4, 2], np.float32))
    spec = conversion.TableConversion("emb", id_mappings.identity())
    refused(tmp_path, [spec], "holds emb/Adagrad beside table emb, which is no slot of sgd", optimizer="sgd")
    refused(tmp_path, [spec], "holds no emb/Adam: table emb was not trained by adam", optimizer="adam")


def run_tool(*args):
    return subprocess.run(
        [sys.executable, "-m", "ps_toolkit.tools.convert_embeddings", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )


@pytest.mark.slow  # two runs of the tool, each a fresh TensorFlow process
def test_the_tool_converts_and_reports_and_refuses_in_one_line(tmp_path):
    one_table_checkpoint(str(tmp_path), np.arange(8, dtype=np.float32).reshape(4, 2))
    output = tmp_path / "out"
    base = [f"--checkpoint={tmp_path}", f"--output_dir={output}", "--table=emb"]
    bad = run_tool(*base, "--mapping=modulo", "--ids=0:12", "--dim=3")
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.strip().splitlines()[-1].endswith("emb has rows of dim 2; the dynamic table emb has dim 3")
    assert "Traceback" not in bad.stderr and not output.exists()
    good = run_tool(*base, "--mapping=modulo", "--ids=0:12")
    assert good.returncode == 0, good.stderr
    assert "emb -> emb: 12 int64 ids written from 4 rows x 2 (modulo from --ids=0:12); 12 ids shared" in good.stdout
    assert f"wrote {output}/model.ckpt-3 (global step 3)" in good.stdout


def test_an_output_dir_holding_a_checkpoint_is_refused(tmp_path):
    one_table_checkpoint(str(tmp_path), np.ones([4, 2], np.float32))
    spec = conversion.TableConversion("emb", id_mappings.identity())
    with pytest.raises(ConfigError, match=f"output dir {tmp_path} already holds a checkpoint"):
        conversion.convert(str(tmp_path), str(tmp_path), [spec])


def test_an_unreadable_checkpoint_is_refused(tmp_path):
    prefix = one_table_checkpoint(str(tmp_path), np.ones([400, 2], np.float32))
    (data,) = [tmp_path / name for name in os.listdir(tmp_path) if ".data-" in name]
    data.write_bytes(data.read_bytes()[:100])
    spec = conversion.TableConversion("emb", id_mappings.identity())
    refused(tmp_path, [spec], f"checkpoint {prefix} is unreadable: ")


@pytest.mark.parametrize("key_dtype", [tf.int64, tf.string])
def test_hash_bucket_feature_columns_give_each_id_the_row_the_column_read(tmp_path, key_dtype):
    feature_column = tf.compat.v1.feature_column
    if key_dtype == tf.int64:
        ids = np.setdiff1d(np.arange(-20, 30, dtype=np.int64), [-1])  # a dense -1 is "no id" to a feature column
    else:
        ids = np.array([f"city {i}".encode() for i in range(50)], dtype=object)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        fed = tf.compat.v1.placeholder(key_dtype, [None, 1])
        buckets = feature_column.categorical_column_with_hash_bucket("x", 7, dtype=key_dtype)
        columns = [feature_column.embedding_column(buckets, 2)]
        read = feature_column.input_layer({"x": fed}, columns)
        tf.compat.v1.train.get_or_create_global_step()
        session.run(tf.compat.v1.global_variables_initializer())
        expected = session.run(read, {fed: ids[:, None]})
        prefix = tf.compat.v1.train.Saver().save(session, str(tmp_path / "model.ckpt"))
    spec = conversion.TableConversion(
        "input_layer/x_embedding/embedding_weights", id_mappings.hash_buckets(ids, "the test's ids"), dynamic="x"
    )
    report = conversion.convert(prefix, str(tmp_path / "out"), [spec])
    (table,) = report.tables
    assert table.placement.key_dtype == key_dtype.name and table.placement.most_per_row > 1
    assert f"{len(ids)} {key_dtype.name} ids written from 7 rows x 2 (hash from the test's ids)" in table.line()
    np.testing.assert_array_equal(restored_rows(report.prefix, "x", ids, key_dtype), expected)


@pytest.mark.parametrize(
    "content, spec, match",
    [
        (b"1\n2\nthree\n", None, r"ids file .*, line 3: 'three' is not an integer id"),
        (b"\xff\xfe\x00", None, r"ids file .*: .*codec can't decode"),
        (b"\n\n", None, r"ids file .* holds no id"),
        (None, "5:5", r"--ids=5:5: the range A:B holds no id"),
        (None, "0:2000000000", r"--ids=0:2000000000: 2000000000 ids, more than one conversion writes"),
        (None, "no/such/file", r"--ids=no/such/file: neither a range A:B nor a file of ids"),
    ],
)
def test_bad_ids_are_one_line_naming_them(tmp_path, content, spec, match):
    if content is not None:
        spec = str(tmp_path / "ids.txt")
        (tmp_path / "ids.txt").write_bytes(content)
    with pytest.raises(ConfigError, match=match) as raised:
        id_mappings.read_ids(spec)
    assert "\n" not in str(raised.value)


def test_a_vocabulary_repeating_a_token_is_refused(tmp_path):
    one_table_checkpoint(str(tmp_path), np.ones([3, 2], np.float32))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("a\nb\na\n")
    spec = conversion.TableConversion("emb", id_mappings.vocabulary(str(vocab)))
    refused(tmp_path, [spec], r"vocab.txt: line 3 repeats line 1's token b'a' \(a token has one row\)")


def test_a_rename_matching_nothing_and_one_onto_a_taken_name_are_refused(tmp_path):
    one_table_checkpoint(str(tmp_path), np.ones([3, 2], np.float32))
    spec = conversion.TableConversion("emb", id_mappings.identity())
    refused(
        tmp_path, [spec], "rename dense=new: no variable of the checkpoint is named dense", rename=[("dense", "new")]
    )
    refused(
        tmp_path,
        [spec],
        "variable global_step is renamed emb/rows/bucket_00/keys, a name another variable or table already has",
        rename=[("global_step", "emb/rows/bucket_00/keys")],
    )


def test_a_rename_given_twice_is_refused(tmp_path):
    one_table_checkpoint(str(tmp_path), np.ones([3, 2], np.float32))
    spec = conversion.TableConversion("emb", id_mappings.identity())
    refused(
        tmp_path, [spec], "rename global_step=... is given twice", rename=[("global_step", "a"), ("global_step", "b")]
    )


def test_an_output_dir_holding_other_files_or_that_cannot_be_made_is_refused(tmp_path):
    one_table_checkpoint(str(tmp_path / "fixed"), np.ones([4, 2], np.float32))
    spec = conversion.TableConversion("emb", id_mappings.identity())
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("x")
    with pytest.raises(ConfigError, match=f"output dir {tmp_path}/busy is not empty"):
        conversion.convert(str(tmp_path / "fixed"), str(tmp_path / "busy"), [spec])
    assert os.listdir(tmp_path / "busy") == ["notes.txt"]
    with pytest.raises(ConfigError, match="output dir /proc/ps_toolkit_no_such/out cannot be made: "):
        conversion.convert(str(tmp_path / "fixed"), "/proc/ps_toolkit_no_such/out", [spec])
