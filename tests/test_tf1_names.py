"""TF 1.x names that public scripts of the contrib era use: tf.contrib.learn.datasets and TF 1.x's all_reduce module.

kubeflow's mnist example loads MNIST through ``tf.contrib.learn.datasets.DATASETS['mnist']``;
tf_cnn_benchmarks' TF 1.15 branch imports ``tensorflow.python.distribute.all_reduce`` at the top, and reaches
``ops.register_tensor_conversion_function`` and ``variables.VariableV1`` where TF 1.x had them.
"""

import os
import re
import sys

import pytest
from fixtures_legacy.launch import RUN_LEGACY
from taskrun import run_script

from ps_toolkit.base.errors import EXIT_CONFIG

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "tests", "fixtures_legacy", "tf1_names_probe.py")
sys.path.insert(0, os.path.join(ROOT, "tests", "corpus"))
import make_data  # noqa: E402  (tests/corpus is not a package)


@pytest.fixture(scope="module")
def mnist_dir(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("mnist"))
    make_data.mnist_idx(folder)
    return folder


def probe(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return run_script([sys.executable, RUN_LEGACY, PROBE, *args], timeout=180, env=env)


def explain(proc) -> str:
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"


def test_all_reduce_imports_and_its_shuffle_builder_sums_across_devices_and_contrib_learn_loads_mnist(mnist_dir):
    done = probe(mnist_dir)
    assert done.returncode == 0, explain(done)
    summed = [[11.0, 22.0, 33.0], [44.0, 55.0, 66.0]]
    assert f"reduced {[summed, summed]}" in done.stdout, explain(done)
    # DATASETS['mnist'](dir) and mnist.load_mnist(dir): the folder's IDX files, as read_data_sets reads them.
    loaded = re.search(r"^mnist \((\d+), 784\) \((\d+),\) (\d+)$", done.stdout, re.MULTILINE)
    assert loaded and loaded[1] == loaded[2] and int(loaded[1]) > 0 and int(loaded[3]) > 0, explain(done)
    assert "hasattr False" in done.stdout, explain(done)


def test_names_tf_moved_between_its_modules_are_served_where_tf1_had_them(mnist_dir):
    done = probe(mnist_dir)
    assert done.returncode == 0, explain(done)
    # A Box converts through the registered function; the VariableV1 honours its collections, as TF 1.x's did.
    assert "moved [4.0, 6.0] True" in done.stdout, explain(done)


@pytest.mark.parametrize(
    "name, said",
    [
        (
            "ring",
            "tensorflow.python.distribute.all_reduce.build_ring_all_reduce: TF 1.x's graph-built all-reduce "
            "was removed from TensorFlow 2.21",
        ),
        ("iris", "tf.contrib.learn.datasets: dataset 'iris' is not in the compat layer"),
        ("iris_key", "tf.contrib.learn.datasets: dataset 'iris' is not in the compat layer"),
    ],
)
def test_a_name_without_an_equivalent_is_refused_in_one_line_exit_2(name, said, mnist_dir):
    done = probe(mnist_dir, name)
    assert done.returncode == EXIT_CONFIG, explain(done)
    errors = [line for line in done.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and said in errors[0], explain(done)
    assert "Traceback" not in done.stderr, explain(done)
