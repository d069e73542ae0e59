"""How a task's session config shares its host's cores."""

from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.task.server import default_intra_op_threads, session_config, tasks_on_host


def local(job_name, task_index=0, workers=1, ps=1, ps_host="localhost"):
    return ClusterConfig.from_host_flags(
        ps_hosts=",".join(f"{ps_host}:{2222 + i}" for i in range(ps)),
        worker_hosts=",".join(f"localhost:{2300 + i}" for i in range(workers)),
        job_name=job_name,
        task_index=task_index,
    )


def test_a_lone_worker_gets_every_core_and_the_ps_its_share():
    # 1 ps + 1 worker on 2 cores: the worker computes, the ps mostly moves bytes.
    assert default_intra_op_threads(local("worker"), cpus=2) == 2
    assert default_intra_op_threads(local("ps"), cpus=2) == 1


def test_computing_tasks_split_the_cores_between_them():
    assert default_intra_op_threads(local("worker", 1, workers=2), cpus=2) == 1
    assert default_intra_op_threads(local("worker", 0, workers=2, ps=2), cpus=8) == 4
    assert default_intra_op_threads(local("ps", 1, workers=2, ps=2), cpus=8) == 2
    # Never fewer than one thread, however crowded the host.
    assert default_intra_op_threads(local("worker", 0, workers=4), cpus=2) == 1


def test_tasks_on_other_hosts_do_not_take_a_share():
    # The ps lives elsewhere: it neither takes this host's cores nor counts here.
    assert default_intra_op_threads(local("worker", 0, workers=1, ps_host="10.0.0.9"), cpus=4) == 4
    assert default_intra_op_threads(local("ps", 0, workers=3, ps_host="10.0.0.9"), cpus=4) == 4


def test_tasks_that_share_a_host_do_not_spin_and_a_task_alone_keeps_the_default():
    assert session_config(local("worker", 0, workers=2)).experimental.disable_thread_spinning
    assert session_config(local("ps", 0, workers=2)).experimental.disable_thread_spinning
    alone = local("worker", 0, workers=1, ps_host="10.0.0.9")
    assert not session_config(alone).experimental.disable_thread_spinning
    assert not session_config(local("ps", 0, workers=3, ps_host="10.0.0.9")).experimental.disable_thread_spinning


def test_every_name_of_a_host_counts_as_that_host():
    loopback = ["localhost:1", "LOCALHOST.:2", "127.0.0.1:3", "[::1]:4", "[0:0:0:0:0:0:0:1]:5", "[::ffff:127.0.0.1]:6"]
    assert tasks_on_host(loopback + ["10.0.0.9:7"], "localhost:9", "test") == 6
    others = ["[2001:db8::1]:1", "[2001:DB8:0::1]:2", "Node-A:3", "node-a:4"]
    assert tasks_on_host(others, "[2001:db8::1]:9", "test") == 2
    assert tasks_on_host(["Node-A:3", "node-a.:4"], "node-a:9", "test") == 2


def test_explicit_thread_counts_win_and_roles_see_only_their_peers():
    config = session_config(local("worker", 0, workers=2), intra_op_threads=3, inter_op_threads=5)
    assert config.intra_op_parallelism_threads == 3
    assert config.inter_op_parallelism_threads == 5
    assert list(config.device_filters) == ["/job:ps", "/job:worker/task:0"]
    ps_config = session_config(local("ps"))
    assert ps_config.device_count["GPU"] == 0
    assert list(ps_config.device_filters) == ["/job:ps/task:0"]
