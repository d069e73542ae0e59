"""Runs a parameter-server job on Spark as one barrier stage: one barrier task per TF task.

    ps-launch-spark --master=spark://10.0.0.5:7077 --num_ps=2 --num_workers=4 --train_steps=5000
    ps-launch-spark --master='local-cluster[2,2,1024]' --restart=on-failure --checkpoint_dir=/shared/ckpt
    ps-launch-spark --master=spark://HOST:7077 --allow_open_ports -- python my_tf1_script.py
    ps-launch-spark --master=spark://HOST:7077 --input_path=/data/rows.parquet --model_fn=m:fn --input_fn=m:input_fn

The flags are ps-launch-local's (topology, training flags, --restart,
--max_restarts, --success_policy, --log_dir), plus the Spark master. Each task
runs in a barrier task on an executor, its port reserved on that executor's host;
the addresses are exchanged with BarrierTaskContext.allGather before any server
starts. A task failing with a retryable status fails the stage, which Spark runs
again (--restart=on-failure); the chief resumes from --checkpoint_dir, which must
be storage every executor reaches. The tasks' output comes back to the run
folder when the stage ends. The exit status is the local launcher's verdict.
"""

from __future__ import annotations

import sys

from absl import app, flags

from ps_toolkit import cli
from ps_toolkit.backends import registry
from ps_toolkit.backends.spark.launcher import SparkOptions
from ps_toolkit.base.errors import ConfigError, ToolkitError
from ps_toolkit.tools import engine_flags

PROG = "launch_spark"
_MASTER = flags.DEFINE_string("master", None, "spark://HOST:PORT[,HOST:PORT], local-cluster[N,CORES,MB] or local[N].")
_EXECUTOR_MEMORY = flags.DEFINE_string("spark_executor_memory", "1g", "Memory of each Spark executor.")
_CONF = flags.DEFINE_multi_string("spark_conf", [], "KEY=VALUE passed to Spark's configuration.")
_INPUT_PATH = flags.DEFINE_string(
    "input_path", None, "A DataFrame Spark reads, dealt over the replicas: their input_fn reads it (spark_partition)."
)
_INPUT_FORMAT = flags.DEFINE_string("input_format", "parquet", "--input_path's format: parquet, csv, json, orc.")


def launch(command: list[str]) -> int:
    """Runs the job the flags describe as one Spark barrier stage; its exit status."""
    if _MASTER.value is None:
        engine_flags.fail(PROG, "--master is required: spark://HOST:PORT, local-cluster[N,CORES,MB] or local[N]")
    bad_conf = [text for text in _CONF.value if "=" not in text]
    if bad_conf:
        engine_flags.fail(PROG, f"--spark_conf={bad_conf[0]!r} is not KEY=VALUE")
    try:
        options = engine_flags.launch_options(PROG, "Spark", command)
        spark_options = SparkOptions(
            master=_MASTER.value,
            executor_memory=_EXECUTOR_MEMORY.value,
            conf=tuple(tuple(text.split("=", 1)) for text in _CONF.value),
            input_path=_INPUT_PATH.value,
            input_format=_INPUT_FORMAT.value,
        )
        return registry.run("spark", options, spark_options).exit_code
    except ConfigError as err:
        engine_flags.fail(PROG, str(err))
    except ToolkitError as err:  # the engine could not be reached or started: one line, its status
        print(f"{PROG}: {err}", file=sys.stderr)
        return err.exit_code


def main() -> None:
    """The ``ps-launch-spark`` command."""
    engine_flags.adopt_launch_flags(__name__)
    cli.register_key_flags_for_program(__name__)
    app.run(lambda command: sys.exit(launch(command)), flags_parser=engine_flags.parser_for(PROG, __doc__))


if __name__ == "__main__":
    main()
