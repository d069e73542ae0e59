"""A real single-node Slurm (munged, slurmctld, slurmd) runs the job make_slurm_job.py writes."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from ps_toolkit.launch.ports import port_is_free
from tests.taskrun import REPO

MAKE_SLURM_JOB = os.path.join(REPO, "scripts", "make_slurm_job.py")
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo")
TRAIN_STEPS = 200
JOB_TIMEOUT_SECS = 150
TERMINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED"}

SLURM_CONF = """\
ClusterName=pstktest
SlurmctldHost={node}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge.sock
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
MailProg=/bin/true
# No cgroups: containers seldom let slurmd manage them, and this test needs none.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# The node offers more CPUs than the machine has: a ps task needs hardly any.
SlurmdParameters=config_overrides
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=pstk Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def unavailable(reason: str):
    """Fails in CI, where Slurm is installed on purpose; skips on a developer's machine."""
    if os.environ.get("CI"):
        pytest.fail(f"Slurm test cannot run in CI: {reason}")
    pytest.skip(reason)


def free_port_run(count: int) -> int:
    """A base port with ``count`` free ports from it, below the ephemeral range."""
    for _ in range(500):
        base = random.randint(20000, 30000)
        if all(port_is_free(base + i) for i in range(count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports found")


class SingleNodeSlurm:
    """munged + slurmctld + slurmd in one folder, on free ports; ``stop()`` ends them and every job."""

    def __init__(self, root: Path):
        self.root = root
        self.conf = root / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self.env.pop("TF_CONFIG", None)
        self.daemons: dict[str, subprocess.Popen] = {}

    def start(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        for folder in ("state", "spool"):
            (self.root / folder).mkdir()
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        ctld_port = free_port_run(2)
        self.conf.write_text(
            SLURM_CONF.format(
                root=self.root,
                node=socket.gethostname().split(".")[0],
                ctld_port=ctld_port,
                slurmd_port=ctld_port + 1,
                cpus=max(8, os.cpu_count() or 1),
            )
        )
        munge_files = {name: self.root / f"munged.{name}" for name in ("pid", "log", "seed")}
        self._spawn(
            "munged",
            ["munged", "-F", f"--key-file={key}", f"--socket={self.root}/munge.sock"]
            + [f"--{name}-file={path}" for name, path in munge_files.items()],
        )
        self._wait_for("munge socket", lambda: (self.root / "munge.sock").exists(), deadline)
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf)])
        self._wait_for("the node to be idle", lambda: "idle" in self.run(["sinfo", "-h", "-o", "%T"]), deadline)

    def _spawn(self, name: str, command: list) -> None:
        log = open(self.root / f"{name}.out", "w")  # noqa: SIM115 - the daemon writes it until stop()
        self.daemons[name] = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        log.close()

    def _wait_for(self, what: str, condition, deadline: float) -> None:
        """Polls ``condition`` until the deadline; a daemon that dies ends the wait at once."""
        while not condition():
            for name, proc in self.daemons.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} waiting for {what}\n{self.logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}\n{self.logs()}")
            # Waiting on a daemon doubles as the pause between polls, and notices its exit.
            try:
                next(iter(self.daemons.values())).wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass

    def run(self, command: list, timeout: float = 20) -> str:
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=timeout, check=False)
        return done.stdout if done.returncode == 0 else ""

    def submit(self, script: Path) -> str:
        done = subprocess.run(
            ["sbatch", "--parsable", str(script)], env=self.env, capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, f"sbatch failed: {done.stderr}\n{self.logs()}"
        return done.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict:
        """scontrol's one-line record of a job, as a dict (empty once slurmctld forgot it)."""
        text = self.run(["scontrol", "show", "job", "-o", job_id])
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def wait_job(self, job_id: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        self._wait_for(f"job {job_id} to end", lambda: self.job(job_id).get("JobState") in TERMINAL_STATES, deadline)
        return self.job(job_id)

    def logs(self) -> str:
        parts = []
        for path in sorted(self.root.glob("*.log")) + sorted(self.root.glob("*.out")):
            parts.append(f"--- {path.name} (tail)\n{path.read_text(errors='replace')[-2000:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancels every job, ends every daemon, and kills whatever ran under this Slurm."""
        if "slurmctld" in self.daemons and self.daemons["slurmctld"].poll() is None:
            self.run(["scancel", "--full", "--partition=pstk"], timeout=10)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.daemons.get(name)
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
        # slurmstepd and the job's tasks are not the daemons' children: find them by our slurm.conf.
        for proc in psutil.process_iter():
            try:
                if proc.environ().get("SLURM_CONF") == str(self.conf) or str(self.conf) in proc.cmdline():
                    proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass


@pytest.fixture
def slurm():
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        unavailable(f"Slurm is not installed (no {', '.join(missing)}): apt-get install slurm-wlm munge")
    if os.geteuid() != 0:
        unavailable("slurmd must run as root to start jobs")
    # munged wants every folder above its socket searchable by all; pytest's tmp_path is private.
    root = Path(tempfile.mkdtemp(prefix="pstk-slurm-"))
    root.chmod(0o755)
    cluster = SingleNodeSlurm(root)
    try:
        # The test starts it: a Slurm that cannot start is then a FAILED test, with the daemons' logs.
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def task_lines(output: str) -> dict[int, list[str]]:
    """srun --label output, split by rank: {0: [lines], 1: [...]}."""
    lines: dict[int, list[str]] = {}
    for line in output.splitlines():
        match = re.match(r"^\s*(\d+): (.*)$", line)
        if match:
            lines.setdefault(int(match.group(1)), []).append(match.group(2))
    return lines


def last_json(lines: list[str]) -> dict:
    for line in reversed(lines):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError("no result line")


@pytest.mark.slow
@pytest.mark.timeout(330)  # Slurm start (60 s) + make (60 s) + the job (JOB_TIMEOUT_SECS) + cleanup
def test_sbatch_runs_one_ps_two_workers_to_the_end(slurm, tmp_path):
    started = time.monotonic()
    slurm.start()
    print(f"\nSlurm up in {time.monotonic() - started:.1f} s")
    base_port = free_port_run(3)
    make = subprocess.run(
        [
            sys.executable,
            MAKE_SLURM_JOB,
            "--num_ps=1",
            "--num_workers=2",
            f"--train_steps={TRAIN_STEPS}",
            f"--checkpoint_dir={tmp_path}/ckpt",
            f"--port_base={base_port}",
            f"--output={tmp_path}/job-%j.out",
            "--time=00:03:00",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert make.returncode == 0, make.stderr
    script = tmp_path / "job.sh"
    script.write_text(make.stdout)

    job_id = slurm.submit(script)
    record = slurm.wait_job(job_id, JOB_TIMEOUT_SECS)
    output_path = tmp_path / f"job-{job_id}.out"
    output = output_path.read_text(errors="replace") if output_path.exists() else "(no job output)"
    report = f"job record: {record}\n--- job output (tail)\n{output[-6000:]}\n{slurm.logs()}"
    # The script execs srun, whose status is the highest of its tasks: 0:0 means every task exited 0.
    assert record.get("JobState") == "COMPLETED" and record.get("ExitCode") == "0:0", report

    lines = task_lines(output)
    assert sorted(lines) == [0, 1, 2], report
    ps_result = last_json(lines[0])
    assert ps_result["job"] == "ps" and ps_result["replicas_done"] == 2, report
    for rank in (1, 2):
        result = last_json(lines[rank])
        assert result["job"] == "worker" and result["task"] == rank - 1, report
        assert result["global_step"] >= TRAIN_STEPS and result["local_steps"] > 0, report
        # Every worker evaluates the shared final model; a late joiner's own first loss says little.
        assert result["test_accuracy"] > 0.8, report
    steps = [int(path.name.split("-")[1].split(".")[0]) for path in (tmp_path / "ckpt").glob("model.ckpt-*.index")]
    assert steps and max(steps) >= TRAIN_STEPS, (steps, report)
    print(f"Slurm job {job_id}: {TRAIN_STEPS} steps, {time.monotonic() - started:.1f} s from sbatch to COMPLETED")
