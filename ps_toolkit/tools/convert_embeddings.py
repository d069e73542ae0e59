"""Turns a TF1 checkpoint's fixed embedding tables into dynamic tables' rows, in a new checkpoint a model on
ps_toolkit.dynamic_embedding tables restores (its first step starts from the trained rows).

    ps-convert-embeddings --checkpoint=/ckpt/fixed --output_dir=/ckpt/dynamic \\
        --table='model/embeddings_*'                       # the identity: id n is row n
    ps-convert-embeddings ... --table=model/user --mapping=modulo --ids=0:5000000   # row id % rows
    ps-convert-embeddings ... --table=model/city --mapping=hash --ids=cities.txt     # hash-bucket column
    ps-convert-embeddings ... --table=model/word --mapping=vocabulary --vocabulary=words.txt

Each --table is a checkpoint variable (whole or saved as .../part_N) or a pattern, optionally
=DYNAMIC_NAME. Its optimizer's slots come along (--optimizer, detected by default); every other
variable is copied under its own name or a --rename. Prints one line per table (with how many ids
shared a row, for modulo and hash buckets). Bad input: one line on stderr, exit status 2, nothing written.
The same as ``python -m ps_toolkit.tools.convert_embeddings``; docs/dynamic_embedding.md, "Migration
from fixed tables".
"""

from __future__ import annotations

import sys

from absl import flags

from ps_toolkit import cli
from ps_toolkit.dynamic_embedding import conversion, id_mappings
from ps_toolkit.dynamic_embedding.fixed_tables import OPTIMIZER_SLOTS

_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "The fixed model's checkpoint: a prefix, or its folder (newest).")
_OUTPUT = flags.DEFINE_string("output_dir", None, "A new or empty folder for the converted checkpoint.")
_TABLES = flags.DEFINE_multi_string(
    "table", [], "A fixed table to convert: NAME or a pattern (model/embeddings_*), optionally NAME=DYNAMIC_NAME."
)
_MAPPING = flags.DEFINE_enum(
    "mapping", "identity", list(id_mappings.KINDS), "How the fixed model turned an id into a row."
)
_IDS = flags.DEFINE_string(
    "ids",
    None,
    "The ids to write: A:B (A .. B-1) or a file of one id per line (modulo, hash: required). With "
    "--mapping=hash a file holds string ids, integers with --key_dtype=int64.",
)
_VOCABULARY = flags.DEFINE_string("vocabulary", None, "--mapping=vocabulary: the file, one token per row.")
_OOV = flags.DEFINE_integer("num_oov_buckets", 0, "--mapping=vocabulary: rows after the last line (not written).")
_STRATEGY = flags.DEFINE_enum(
    "partition_strategy",
    "div",
    list(id_mappings.PARTITION_STRATEGIES),
    "How the fixed model's lookup split a partitioned table: div (ps_toolkit, feature columns) or mod "
    "(tf.compat.v1.nn.embedding_lookup's default).",
)
_PARTITIONS = flags.DEFINE_integer(
    "num_partitions", None, "--partition_strategy=mod: the tables' number of parts (when saved whole)."
)
_DIM = flags.DEFINE_integer("dim", None, "The dynamic tables' dim, checked against the checkpoint's.")
_KEY_DTYPE = flags.DEFINE_enum("key_dtype", None, list(conversion.KEY_DTYPE_NAMES), "The dynamic tables' key dtype.")
_OPTIMIZER = flags.DEFINE_enum(
    "optimizer", "auto", ["auto", *OPTIMIZER_SLOTS], "The optimizer whose slots of the tables come along."
)
_RENAME = flags.DEFINE_multi_string("rename", [], "OLD=NEW: copy the variables OLD and OLD/... as NEW and NEW/....")
_ADMIT_AFTER = flags.DEFINE_integer("admit_after", 1, "The dynamic tables' admit_after (each id's starting count).")


def mapping_of_flags() -> id_mappings.IdMapping:
    """The IdMapping --mapping, --ids, --vocabulary and --num_oov_buckets describe."""
    kind = _MAPPING.value
    if kind == "vocabulary":
        if not _VOCABULARY.value:
            cli.fail("--mapping=vocabulary needs --vocabulary=FILE (one token per row)")
        if _IDS.value:
            cli.fail("--ids goes with --mapping=identity, modulo or hash; a vocabulary's ids are its lines")
        return id_mappings.vocabulary(_VOCABULARY.value, _OOV.value)
    if _VOCABULARY.value or _OOV.value:
        cli.fail(f"--vocabulary and --num_oov_buckets go with --mapping=vocabulary, not --mapping={kind}")
    if kind in id_mappings.BUCKETED and not _IDS.value:
        cli.fail(f"--mapping={kind} needs --ids (A:B or a file): buckets do not say which ids used them")
    if kind == "hash":
        strings = _KEY_DTYPE.value != "int64" and not id_mappings.is_range(_IDS.value)
        ids, source = id_mappings.read_tokens(_IDS.value) if strings else id_mappings.read_ids(_IDS.value)
        return id_mappings.hash_buckets(ids, source)
    ids, source = id_mappings.read_ids(_IDS.value) if _IDS.value else (None, "")
    return id_mappings.identity(ids, source) if kind == "identity" else id_mappings.modulo(ids, source)


def _pair(text: str, flag: str) -> tuple[str, str]:
    name, _, other = text.partition("=")
    if not name or (flag == "--rename" and not other):
        cli.fail(f"{flag}={text}: expected {'OLD=NEW' if flag == '--rename' else 'NAME or NAME=DYNAMIC_NAME'}")
    return name, other


def _main(argv):
    if len(argv) > 1:
        cli.fail(f"unexpected arguments {' '.join(argv[1:])!r}; flags look like --name=value")
    for flag in (_CHECKPOINT, _OUTPUT):
        if not flag.value:
            cli.fail(f"--{flag.name} is required")
    if not _TABLES.value:
        cli.fail("--table is required: the fixed table(s) to convert, e.g. --table='model/embeddings_*'")
    with cli.user_errors():
        mapping = mapping_of_flags()
        tables = [
            conversion.TableConversion(
                fixed, mapping, dynamic or None, _DIM.value, _KEY_DTYPE.value, _STRATEGY.value, _PARTITIONS.value
            )
            for fixed, dynamic in (_pair(text, "--table") for text in _TABLES.value)
        ]
        report = conversion.convert(
            _CHECKPOINT.value,
            _OUTPUT.value,
            tables,
            optimizer=_OPTIMIZER.value,
            rename=[_pair(text, "--rename") for text in _RENAME.value],
            admit_after=_ADMIT_AFTER.value,
        )
    sys.stdout.write("".join(line + "\n" for line in report.lines()))


def main() -> None:
    """The ``ps-convert-embeddings`` command."""
    cli.run_tool(_main, __name__)


if __name__ == "__main__":
    main()
