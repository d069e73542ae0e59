"""The cluster of a Slurm job step, read from its environment (SlurmClusterResolver semantics).

Inside ``srun``, every task sees the step's node list and tasks per node, and
its own rank. From those alone each task computes the same cluster: the hosts
in the order Slurm lays the ranks out, one port per task on a node (base port
plus the task's offset on that node), the first ``num_ps`` ranks as parameter
servers and the rest as workers, or the roles the user asks for
(``"ps:2,chief:1,worker:*,evaluator:1"``).

Example:
    config = cluster_from_slurm_env(os.environ, num_ps=1, base_port=8888)
    config.device    # '/job:worker/task:0' for SLURM_PROCID=1
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.config import JOB_NAMES, PS, WORKER, ClusterConfig

DEFAULT_BASE_PORT = 8888  # TensorFlow's SlurmClusterResolver default
SOURCE = "the Slurm environment"
# (node list, tasks per node, task count) of the srun step, then of the whole
# job: the step that runs the tasks may use only part of the job's allocation.
STEP_VARS = ("SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS")
JOB_VARS = ("SLURM_JOB_NODELIST", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS")

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_TASK_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def expand_hostlist(text: str, source: str) -> list[str]:
    """Expands a Slurm hostlist: 'node[01-03,07],gpu5' -> node01 node02 node03 node07 gpu5.

    Several bracket groups in one name expand as a product, as Slurm does
    ('r[1-2]-n[1-2]' -> r1-n1 r1-n2 r2-n1 r2-n2); zero padding is kept.
    """
    hosts = []
    for item in _split_outside_brackets(text, source):
        pieces = re.split(r"(\[[^\]]*\])", item)
        choices = [_expand_brackets(piece, text, source) if piece.startswith("[") else [piece] for piece in pieces]
        hosts.extend("".join(parts) for parts in itertools.product(*choices))
    return hosts


def _split_outside_brackets(text: str, source: str) -> list[str]:
    items, depth, current = [], 0, ""
    for char in text.strip():
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if depth not in (0, 1):
            raise ConfigError(f"{source}={text!r} has unbalanced brackets")
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    if depth != 0 or any(not item or item.startswith("[") for item in items):
        raise ConfigError(f"{source}={text!r} is not a Slurm hostlist such as 'node[01-03,07],gpu5'")
    return items


def _expand_brackets(group: str, text: str, source: str) -> list[str]:
    values = []
    for part in group[1:-1].split(","):
        match = _RANGE.match(part)
        if not match:
            raise ConfigError(f"{source}={text!r} has a bad range {part!r}; expected N or N-M")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise ConfigError(f"{source}={text!r} has a descending range {part!r}")
        values.extend(str(n).zfill(len(low)) for n in range(int(low), int(high) + 1))
    return values


def expand_tasks_per_node(text: str, source: str) -> list[int]:
    """Expands Slurm's tasks-per-node list: '2(x3),1' -> [2, 2, 2, 1]."""
    counts = []
    for part in text.strip().split(","):
        match = _TASK_COUNT.match(part.strip())
        if not match or int(match.group(1)) < 1:
            raise ConfigError(f"{source}={text!r} has a bad entry {part!r}; expected N or N(xR), e.g. '2(x3),1'")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def rank_addresses(hosts: list[str], tasks_per_node: list[int], distribution: str, base_port: int) -> list[str]:
    """The address of every rank, in rank order: host:base_port+offset of the rank on its node.

    Block distribution (Slurm's default) fills each node before the next;
    cyclic deals ranks round-robin over the nodes that still have room.
    TensorFlow's resolver assumes block over sorted host names; Slurm's node
    lists come sorted, so for block steps the two agree.
    """
    slots = [[host] * count for host, count in zip(hosts, tasks_per_node, strict=True)]
    if distribution == "cyclic":
        order = [host for layer in itertools.zip_longest(*slots) for host in layer if host is not None]
    else:
        order = [host for node in slots for host in node]
    used: dict[str, int] = {}
    addresses = []
    for host in order:
        addresses.append(f"{host}:{base_port + used.get(host, 0)}")
        used[host] = used.get(host, 0) + 1
    return addresses


def parse_roles(text: str, num_tasks: int, source: str = "--slurm_roles") -> list[tuple[str, int]]:
    """'ps:2,chief:1,worker:*' -> [(ps, 2), (chief, 1), (worker, num_tasks - 3)]; ranks fill them in order."""
    roles, rest = [], None
    for part in text.split(","):
        job, sep, count = part.strip().partition(":")
        if not sep or job not in JOB_NAMES or job in (name for name, _ in roles):
            raise ConfigError(f"{source}={text!r}: bad entry {part!r}; use job:count with jobs {', '.join(JOB_NAMES)}")
        if count == "*" and rest is None:
            rest = len(roles)
            roles.append((job, 0))
        elif count.isdigit():
            roles.append((job, int(count)))
        else:
            raise ConfigError(f"{source}={text!r}: count {count!r} is not a number (one job may use '*')")
    given = sum(count for _, count in roles)
    if rest is not None:
        roles[rest] = (roles[rest][0], num_tasks - given)
    if sum(count for _, count in roles) != num_tasks or any(count < 0 for _, count in roles):
        raise ConfigError(f"{source}={text!r} asks for {given} tasks but the Slurm step has {num_tasks}")
    return [(job, count) for job, count in roles if count > 0]


def cluster_from_slurm_env(
    environ: Mapping[str, str], num_ps: int = 1, base_port: int = DEFAULT_BASE_PORT, roles: str | None = None
) -> ClusterConfig:
    """This task's cluster, from the variables Slurm sets for every task of a step.

    Args:
        environ: the task's environment (``os.environ``).
        num_ps: the first ``num_ps`` ranks are parameter servers, the rest workers.
        base_port: the port of the first task on each node; the next tasks there use the next ports.
        roles: instead of ``num_ps``, the jobs in rank order, e.g. ``"ps:1,chief:1,worker:*"``.
    """
    nodelist_var, counts_var, num_var = STEP_VARS if environ.get(STEP_VARS[0], "").strip() else JOB_VARS
    nodelist, counts_text = _required(environ, nodelist_var), _required(environ, counts_var)
    hosts = expand_hostlist(nodelist, nodelist_var)
    tasks_per_node = expand_tasks_per_node(counts_text, counts_var)
    if len(hosts) != len(tasks_per_node):
        raise ConfigError(
            f"{nodelist_var}={nodelist!r} names {len(hosts)} node(s) but "
            f"{counts_var}={counts_text!r} gives task counts for {len(tasks_per_node)}"
        )
    num_tasks = sum(tasks_per_node)
    if environ.get(num_var, str(num_tasks)).strip() != str(num_tasks):
        raise ConfigError(
            f"{num_var}={environ[num_var]!r} disagrees with {counts_var}={counts_text!r} ({num_tasks} tasks)"
        )
    if not 1 <= base_port <= 65536 - max(tasks_per_node):
        raise ConfigError(f"base port {base_port} leaves no room for {max(tasks_per_node)} task(s) per node")
    rank = _int_var(environ, "SLURM_PROCID", num_tasks)
    distribution = environ.get("SLURM_DISTRIBUTION", "block").split(":")[0].split(",")[0]
    if distribution not in ("block", "cyclic", "*", ""):
        raise ConfigError(f"SLURM_DISTRIBUTION={environ['SLURM_DISTRIBUTION']!r} is not supported; use block or cyclic")
    addresses = rank_addresses(hosts, tasks_per_node, distribution, base_port)
    _check_own_slot(environ, addresses[rank], base_port)
    if roles is not None:
        layout = parse_roles(roles, num_tasks)
    else:
        if not 0 <= num_ps < num_tasks:
            raise ConfigError(f"{num_ps} ps task(s) leave no worker among the {num_tasks} Slurm tasks")
        layout = [(PS, num_ps), (WORKER, num_tasks - num_ps)]
    jobs, start, task = {}, 0, None
    for job, count in layout:
        jobs[job] = tuple(addresses[start : start + count])
        if start <= rank < start + count:
            task = (job, rank - start)
        start += count
    return ClusterConfig(
        jobs={j: h for j, h in jobs.items() if h}, task_type=task[0], task_index=task[1], source=SOURCE
    )


def _required(environ: Mapping[str, str], name: str) -> str:
    if not environ.get(name, "").strip():
        raise ConfigError(f"{name} is not set: not inside a Slurm job step (start the task with srun)")
    return environ[name]


def _int_var(environ: Mapping[str, str], name: str, limit: int) -> int:
    text = environ.get(name, "").strip()
    if not text.isdigit() or int(text) >= limit:
        raise ConfigError(f"{name}={text!r} is not a task rank in 0-{limit - 1} (run the task with srun)")
    return int(text)


def _check_own_slot(environ: Mapping[str, str], address: str, base_port: int) -> None:
    """The rank's computed node and offset must be where Slurm actually put it.

    A mismatch means the layout was guessed wrong (an unusual distribution),
    and every task would otherwise dial the wrong peers without a word.
    """
    host, port = address.rsplit(":", 1)
    node = environ.get("SLURMD_NODENAME")
    if node and node != host:
        raise ConfigError(f"SLURMD_NODENAME={node!r} but the step layout puts this rank on {host!r}")
    local = environ.get("SLURM_LOCALID")
    if local and local.isdigit() and int(local) != int(port) - base_port:
        raise ConfigError(f"SLURM_LOCALID={local} but the step layout gives this rank offset {int(port) - base_port}")
