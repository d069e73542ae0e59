"""Cluster sources by name (ps_toolkit.cluster.sources) and the one TF_CONFIG parser (ps_toolkit.cluster.tf_config)."""

import json

import pytest
from absl import flags

from ps_toolkit import cli
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster import sources, tf_config
from ps_toolkit.cluster.config import ClusterConfig

FLAGS = flags.FLAGS
SCHEDULER_ENV = {"MY_HOSTS": "h0:7000,h1:7000,h2:7000", "MY_ROLE": "worker", "MY_INDEX": "1"}


def from_my_scheduler(environ, options):
    """A user's source: the first host is the ps, the others workers; the role from two variables."""
    hosts = environ["MY_HOSTS"].split(",")
    return ClusterConfig.from_host_flags(
        ps_hosts=hosts[0],
        worker_hosts=",".join(hosts[1:]),
        job_name=environ["MY_ROLE"],
        task_index=int(environ["MY_INDEX"]),
    )


@pytest.fixture
def registered():
    sources.register_source("my_scheduler", from_my_scheduler)
    yield "my_scheduler"
    sources.SOURCES.unregister("my_scheduler")


@pytest.fixture
def task_flags():
    """The task's cluster flags parsed from the given arguments; unparsed again afterwards."""
    if "cluster_from" not in FLAGS:
        cli.define_cluster_flags()

    def parse(*args):
        FLAGS.unparse_flags()
        FLAGS(["run_task.py", *args])

    yield parse
    FLAGS.unparse_flags()


def test_a_users_source_registered_with_one_call_gives_the_cluster(registered):
    cluster = sources.cluster_from_source(registered, SCHEDULER_ENV)
    assert (cluster.task_type, cluster.task_index) == ("worker", 1)
    assert cluster.jobs == {"ps": ("h0:7000",), "worker": ("h1:7000", "h2:7000")}
    assert sources.SOURCES.names() == ("slurm", "tf_config", "my_scheduler")


def test_the_task_flags_pick_a_users_source_by_name(registered, task_flags, monkeypatch):
    task_flags(f"--cluster_from={registered}")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    cluster = cli.cluster_from_flags(SCHEDULER_ENV)
    assert cluster.device == "/job:worker/task:1"


def test_the_task_flags_take_a_users_source_by_module_and_function(task_flags, tmp_path, monkeypatch):
    (tmp_path / "my_sources.py").write_text(
        "from ps_toolkit.cluster.config import ClusterConfig\n"
        "def one_worker(environ, options):\n"
        "    return ClusterConfig.from_host_flags(\n"
        "        ps_hosts=None, worker_hosts=environ['ADDR'], job_name='worker', task_index=0)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    task_flags("--cluster_from=my_sources:one_worker")
    try:
        assert cli.cluster_from_flags({"ADDR": "localhost:7100"}).jobs == {"worker": ("localhost:7100",)}
    finally:
        sources.SOURCES.unregister("my_sources:one_worker")


def test_an_unknown_source_is_one_line_listing_the_registered_ones(registered, task_flags):
    task_flags("--cluster_from=kubernetes")
    with pytest.raises(ConfigError) as caught:
        cli.cluster_from_flags({})
    assert str(caught.value) == (
        "unknown cluster source 'kubernetes' (from --cluster_from); registered: slurm, tf_config, my_scheduler"
    )


def test_flags_beside_a_source_are_refused(registered, task_flags):
    task_flags(f"--cluster_from={registered}", "--worker_hosts=a:1")
    with pytest.raises(ConfigError, match="--cluster_from=my_scheduler .* do not also give --worker_hosts, TF_CONFIG"):
        cli.cluster_from_flags(dict(SCHEDULER_ENV, TF_CONFIG='{"cluster": {}}'))


def test_the_built_in_sources_read_slurm_and_tf_config(task_flags):
    slurm_env = {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "n1"}
    slurm_env["SLURM_STEP_TASKS_PER_NODE"] = "2"
    cluster = sources.cluster_from_source("slurm", slurm_env, {"slurm_num_ps": 1, "slurm_port_base": 9000})
    assert cluster.jobs == {"ps": ("n1:9000",), "worker": ("n1:9001",)} and cluster.task_type == "ps"
    text = json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}})
    task_flags("--cluster_from=tf_config")
    assert cli.cluster_from_flags({"TF_CONFIG": text}).device == "/job:worker/task:1"
    with pytest.raises(ConfigError, match="TF_CONFIG is not set"):
        sources.cluster_from_source("tf_config", {})


def test_a_source_that_returns_no_cluster_is_named(registered):
    sources.register_source("broken", lambda environ, options: {"ps": ["a:1"]})
    try:
        with pytest.raises(ConfigError, match="--cluster_from=broken: the source returned dict, not a ClusterConfig"):
            sources.cluster_from_source("broken", {})
    finally:
        sources.SOURCES.unregister("broken")


@pytest.mark.parametrize(
    ("name", "source", "words"),
    [("slurm", from_my_scheduler, "built in"), ("", from_my_scheduler, "needs a name"), ("x", None, "a function")],
)
def test_a_bad_registration_is_refused(name, source, words):
    with pytest.raises(ValueError, match=words):
        sources.register_source(name, source)
    assert sources.SOURCES.names() == sources.BUILT_IN_SOURCES


NOT_JSON = (
    "TF_CONFIG is not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1)): "
    "{cluster:"
)


class EstimatorKindOfError(ValueError):
    pass


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{cluster:", NOT_JSON),
        ("[1, 2]", "TF_CONFIG must be a JSON object, got [1, 2]"),
    ],
)
def test_one_tf_config_parser_with_the_callers_kind_of_error(text, message):
    with pytest.raises(ConfigError) as caught:
        ClusterConfig.from_tf_config(text)
    assert str(caught.value) == message
    with pytest.raises(EstimatorKindOfError) as caught:
        tf_config.read_tf_config({"TF_CONFIG": text}, error=EstimatorKindOfError)
    assert str(caught.value) == message


def test_a_blank_tf_config_is_no_tf_config():
    assert tf_config.tf_config_text({"TF_CONFIG": "  "}) is None
    assert tf_config.read_tf_config({}) is None
    assert tf_config.read_tf_config({"TF_CONFIG": '{"cluster": {}}'}) == {"cluster": {}}
