"""A real ps's resident memory while its dynamic table is fed only new ids, with the default bound and without.

    python -m benchmarks.table_memory_ps [--ids=5000000] [--batch=50000] [--memory_mb=256]

``scripts/launch_local.py`` with 1 ps and 1 worker (the chief) trains
``benchmarks.fresh_ids_model`` (one table, dim 8, Adagrad, every batch ids never
seen before) for ``ids / batch`` steps, the ps counting ``--memory_mb`` as its
memory (PS_TOOLKIT_PS_MEMORY_MB); the chief's maintenance runs every
``train_steps / 20`` steps, as always, and at most once a session.run
(``--steps_per_run``, 20 by default). This process reads the ps's resident memory
every half second (the ps task's pid from the run folder's pids.json) and the global
step from the chief's progress lines in its task log. Prints one JSON line per bound: the ps's memory
at the first and each later fifth of the steps, its peak, and the table's rows at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

import psutil

from benchmarks import CHECKOUT

PREFIX = "table_memory_ps: "
_STEP = re.compile(r'"global_step": (\d+)')
_FOLDER = "launcher: run folder "
_RESULT = re.compile(r"^\[worker:0\] (\{.*\"tables\".*\})$")


def _ps_process(run_folder: str | None) -> psutil.Process | None:
    """The ps task's process, from the run folder's pids.json (None until the launcher wrote it)."""
    try:
        with open(os.path.join(run_folder, "pids.json")) as f:
            return psutil.Process(json.load(f)["ps:0"])
    except (TypeError, OSError, ValueError, KeyError, psutil.Error):
        return None


def _last_step(run_folder: str | None) -> int:
    """The chief's last global step in its task log's progress lines (0 before any)."""
    try:
        with open(os.path.join(run_folder, "worker-0.log")) as f:
            found = _STEP.findall(f.read())
    except (TypeError, OSError):
        return 0
    return int(found[-1]) if found else 0


def measure(bound: str, ids: int, batch: int, memory_mb: int, timeout_s: float, steps_per_run: int = 20) -> dict:
    """One launch_local run; the ps's memory along the steps and the chief's table measures at the end."""
    steps = ids // batch
    params = {"batch": batch, **({"max_rows_per_shard": 0} if bound == "none" else {})}
    command = [
        sys.executable,
        "scripts/launch_local.py",
        "--num_ps=1",
        "--num_workers=1",
        "--model_fn=benchmarks.fresh_ids_model:model_fn",
        "--input_fn=benchmarks.fresh_ids_model:input_fn",
        "--optimizer=adagrad",
        "--learning_rate=0.1",
        f"--batch_size={batch}",
        f"--train_steps={steps}",
        f"--steps_per_run={steps_per_run}",  # the chief's maintenance runs at most once a session.run
        f"--save_checkpoint_steps={10 * steps}",  # no save while the ids arrive: only the final one
        f"--params={json.dumps(params)}",
    ]
    env = {**os.environ, "PS_TOOLKIT_PS_MEMORY_MB": str(memory_mb), "PYTHONPATH": CHECKOUT}
    launcher = subprocess.Popen(
        command, cwd=CHECKOUT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    state = {"folder": None, "result": None}

    def read():
        for line in launcher.stdout:
            if line.startswith(_FOLDER):
                state["folder"] = line[len(_FOLDER) :].strip()
            match = _RESULT.match(line.strip())
            if match:
                state["result"] = json.loads(match.group(1))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    samples = []  # (global step, resident MB)
    deadline = time.monotonic() + timeout_s
    try:
        while launcher.poll() is None and time.monotonic() < deadline:
            ps = _ps_process(state["folder"])
            if ps is not None:
                try:
                    samples.append((_last_step(state["folder"]), ps.memory_info().rss / 2**20))
                except psutil.Error:
                    pass
            time.sleep(0.5)
    finally:
        if launcher.poll() is None:
            launcher.terminate()
        launcher.wait(timeout=60)
        reader.join(timeout=10)
    table = (state["result"] or {}).get("tables", {}).get("model/fresh", {})
    along = {}
    for fifth in range(6):
        at = [mb for step, mb in samples if step >= max(1, fifth * steps // 5)]
        along[f"{fifth * 20}%"] = round(at[0]) if at else None
    return {
        "bound": bound,
        "steps_per_run": steps_per_run,
        "exit": launcher.returncode,
        "ps_rss_mb_at_steps": along,
        "ps_rss_mb_peak": round(max(mb for _, mb in samples)) if samples else None,
        "rows": table.get("rows"),
        "max_rows_per_shard": table.get("max_rows_per_shard"),
        "bytes_per_shard": table.get("bytes_per_shard"),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=int, default=5_000_000)
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--memory_mb", type=int, default=256)
    parser.add_argument("--bounds", default="default,none", help="which of default,none to run")
    parser.add_argument("--steps_per_run", type=int, default=20, help="launch_local's default: 20")
    parser.add_argument("--timeout_s", type=float, default=1800)
    args = parser.parse_args(argv)
    for bound in args.bounds.split(","):
        record = measure(bound, args.ids, args.batch, args.memory_mb, args.timeout_s, args.steps_per_run)
        print(PREFIX + json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
