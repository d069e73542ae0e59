"""Start-up overhead of each engine against the local launcher: the same short job, launched in turn.

    python -m benchmarks.engine_startup --rounds=3 --ray_address=127.0.0.1:6379 \
        --spark_master=spark://127.0.0.1:7077

Each round runs the job (1 ps + 2 workers, --train_steps=20) once per launcher,
one after the other, so the machine's load falls on every launcher alike; the
report is each launcher's median wall time and its ratio to the local launcher's.
Ray is measured starting and stopping a Ray of the launch's own (its start-up
included) and, with --ray_address, on a running cluster; Spark only on a running
--spark_master.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

_ROUNDS = flags.DEFINE_integer("rounds", 3, "Launches of each launcher.")
_RAY = flags.DEFINE_string("ray_address", None, "A running Ray cluster to measure besides a Ray of the launch's own.")
_SPARK = flags.DEFINE_string("spark_master", None, "A running Spark master; default: Spark is not measured.")
_STEPS = flags.DEFINE_integer("train_steps", 20, "The job's steps: small, so start-up dominates.")
_TIMEOUT = flags.DEFINE_float("timeout_secs", 600.0, "Bound on one launch.")


def _commands(open_ports: list[str]) -> dict[str, list[str]]:
    job = ["--num_ps=1", "--num_workers=2", f"--train_steps={_STEPS.value}", "--nochart", "--quiet", *open_ports]
    commands = {"local": [sys.executable, "-m", "ps_toolkit.tools.launch_local", *job]}
    ray = [sys.executable, "-m", "ps_toolkit.tools.launch_ray"]
    commands["ray, own Ray"] = [*ray, "--ray_num_cpus=4", *job]
    if _RAY.value:
        commands["ray, cluster"] = [*ray, f"--address={_RAY.value}", *job]
    if _SPARK.value:
        spark = [f"--master={_SPARK.value}", "--spark_executor_memory=512m"]
        commands["spark"] = [sys.executable, "-m", "ps_toolkit.tools.launch_spark", *spark, *job]
    return commands


def _launch(argv: list[str]) -> float:
    """Wall seconds of one launch that succeeded (RuntimeError otherwise: a failed run measures nothing)."""
    with tempfile.TemporaryDirectory(prefix="pstk-startup-") as log_dir:
        started = time.monotonic()
        done = subprocess.run([*argv, f"--log_dir={log_dir}"], capture_output=True, text=True, timeout=_TIMEOUT.value)
        elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return elapsed


def main(argv: list[str]) -> None:
    from ps_toolkit.network import port_guard

    open_ports = [] if port_guard.unavailable_reason() is None else ["--allow_open_ports"]
    commands = _commands(open_ports)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for round_number in range(1, _ROUNDS.value + 1):
        for name, command in commands.items():
            times[name].append(_launch(command))
            print(f"round {round_number}: {name} {times[name][-1]:.1f}s", flush=True)
    local = statistics.median(times["local"])
    print("launcher      median  ratio to local  runs")
    for name, values in times.items():
        median = statistics.median(values)
        runs = " ".join(f"{value:.1f}" for value in values)
        print(f"{name:<12}  {median:5.1f}s  {median / local:13.2f}x  {runs}")


if __name__ == "__main__":
    app.run(main)
