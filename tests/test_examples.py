"""examples/<name>/: each has a README whose commands name files that exist, and its test beside it.

The examples' own runs are tested beside them (examples/<name>/test_<name>.py); pytest collects them
through pyproject.toml's testpaths.
"""

import os
import re

import pytest

from tests.taskrun import REPO

EXAMPLES = os.path.join(REPO, "examples")
NAMES = sorted(
    name for name in os.listdir(EXAMPLES) if os.path.isdir(os.path.join(EXAMPLES, name)) and name.isidentifier()
)
# A repository file named in a command, as the READMEs write them: from the root, or under REPO/.
PATH = re.compile(r"(?<![\w/])(?:REPO/)?((?:examples|scripts)/[\w./-]+\.py)\b")


def readme_commands(name: str) -> str:
    """The text of the ```bash blocks of examples/NAME/README.md."""
    with open(os.path.join(EXAMPLES, name, "README.md"), encoding="utf-8") as handle:
        return "\n".join(re.findall(r"^```bash\n(.*?)^```", handle.read(), re.M | re.S))


@pytest.mark.parametrize("name", NAMES)
def test_an_example_has_its_test_and_a_readme_with_commands_that_name_real_files(name):
    folder = os.path.join(EXAMPLES, name)
    assert {f"test_{name}.py", f"{name}_test.py"} & set(os.listdir(folder)), f"no test beside {folder}"
    commands = readme_commands(name)
    # A script by its path, or a model's module by --model_fn=MODULE:FUNCTION with PYTHONPATH=examples/NAME.
    paths = PATH.findall(commands)
    if f"PYTHONPATH=examples/{name} " in commands:
        paths += [f"examples/{name}/{module}.py" for module in re.findall(r"--\w+_fn=(\w+):", commands)]
    assert any(path.startswith(f"examples/{name}/") for path in paths), f"no command of {name}/README.md runs it"
    missing = [path for path in paths if not os.path.isfile(os.path.join(REPO, path))]
    assert not missing, f"{name}/README.md names files that do not exist: {missing}"


def test_examples_readme_and_docs_list_every_example():
    assert {"mnist_softmax_async", "wide_deep", "digits_cnn"} <= set(NAMES), NAMES
    with open(os.path.join(EXAMPLES, "README.md"), encoding="utf-8") as handle:
        index = handle.read()
    assert not [name for name in NAMES if f"({name}/)" not in index], "examples/README.md must link every example"
    with open(os.path.join(REPO, "docs", "textbook.md"), encoding="utf-8") as handle:
        docs = handle.read()
    legacy = [re.findall(r"run_legacy\.py (?:REPO/)?(examples/\S+\.py)", readme_commands(name)) for name in NAMES]
    legacy = sorted({path for paths in legacy for path in paths})
    assert legacy and not [path for path in legacy if path not in docs], (legacy, "docs/textbook.md")
