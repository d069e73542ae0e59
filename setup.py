"""Installs ps_toolkit: `pip install -e .` (add `[test]` for the test tools)."""

import pathlib

from setuptools import find_packages, setup

setup(
    name="ps_toolkit",
    version="0.1.0",
    description="TF1-style parameter-server training (between-graph replication) on today's TensorFlow",
    long_description=pathlib.Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # The compat layer is the repository's compat/ folder, installed under a name no other
    # distribution's top-level package can take.
    packages=[*find_packages(include=["ps_toolkit", "ps_toolkit.*"]), "ps_toolkit_compat", "ps_toolkit_compat.tfra"],
    package_dir={"ps_toolkit_compat": "compat"},
    package_data={"ps_toolkit.models": ["embedded_digits/*.gz"]},
    entry_points={
        "console_scripts": [
            "ps-run-task = ps_toolkit.tools.run_task:main",
            "ps-launch-local = ps_toolkit.tools.launch_local:main",
            "ps-launch-ray = ps_toolkit.tools.launch_ray:main",
            "ps-launch-spark = ps_toolkit.tools.launch_spark:main",
            "ps-run-legacy = ps_toolkit_compat.run_legacy:main",
            "ps-make-slurm-job = ps_toolkit.tools.make_slurm_job:main",
            "ps-make-tfjob = ps_toolkit.tools.make_tfjob:main",
            "ps-convert-embeddings = ps_toolkit.tools.convert_embeddings:main",
        ]
    },
    install_requires=[
        # The versions CI tests (the full suite on 2.21, the fast tier on 2.22): ps_toolkit/base/tf_internals.py
        # uses private TensorFlow names, which tests/test_tf_internals.py checks against these versions only.
        "tensorflow>=2.21,<2.23",
        # The maintained legacy Keras: restores tf.compat.v1.layers for old scripts. Each tf-keras release pins
        # its TensorFlow minor (tf-keras 2.21: tensorflow<2.22), so pip installs the pair that match; until a
        # tf-keras 2.22 is released, TensorFlow 2.22 goes in with --no-deps (README.md, Dependencies).
        "tf-keras",
        # tf.estimator for old scripts (compat/estimator_support.py): its last release, pure Python, no deps.
        "tensorflow-estimator==2.15.0",
        "absl-py",
        "psutil",
        # Charts of loss and steps/s in the launcher's run folder.
        "matplotlib",
        # Each task's role in its command line (ps, top, pgrep -f job_name=ps), forked tasks included.
        "setproctitle",
    ],
    extras_require={
        # The engines ps-launch-ray and ps-launch-spark run jobs on (Spark also needs a Java 17+ runtime).
        "ray": ["ray>=2.60"],
        "spark": ["pyspark>=4.0"],
        # PyYAML and jsonschema let the tests read and check the generated
        # Kubernetes manifests with an independent parser; runtime needs neither.
        # retrying: imported by Kubeflow's tf_smoke.py in tests/corpus, kept as published.
        "test": [
            "pytest",
            "pytest-timeout",
            "pytest-xdist>=3.8",
            "ruff",
            "pyyaml",
            "jsonschema",
            "import-linter",
            "retrying",
        ],
    },
)
