"""Extracts seed 002's Mastering TensorFlow ch. 15 scripts from the notebook text, and applies the known fixes."""

from __future__ import annotations

import ast
import keyword
import os
import re

SEEDS_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "..", "shared", "seeds"
)
CELL_MARK = "In [0]:"
# A column-0 line starting "Word word" where Word is no Python keyword: notebook prose.
_PROSE = re.compile(r"^([A-Za-z]+) [A-Za-z]")


def seed_text() -> str | None:
    """Seed 002's text, or None when ../shared/seeds (beside the clone) is absent."""
    if not os.path.isdir(SEEDS_DIR):
        return None
    for name in sorted(os.listdir(SEEDS_DIR)):
        if name.startswith("002_"):
            with open(os.path.join(SEEDS_DIR, name), encoding="utf-8") as handle:
                return handle.read()
    return None


def code_cells(text: str) -> list[str]:
    """The code of every ``In [0]:`` cell: its lines up to the next heading, cell or prose line."""
    cells = []
    for chunk in text.split(CELL_MARK)[1:]:
        lines = []
        for line in chunk.splitlines()[1:]:
            prose = _PROSE.match(line)
            if line.startswith("##") or (prose and prose.group(1) not in keyword.kwlist):
                break
            lines.append(line)
        cells.append("\n".join(lines).strip("\n") + "\n")
    return cells


def seed_scripts(text: str) -> dict[str, str]:
    """{'async': source, 'sync': source}: the import cell, then each script's flags and main.

    The async script's flags are a cell of their own; the sync script's share its main cell.
    """
    cells = code_cells(text)
    imports = next(cell for cell in cells if cell.startswith("import sys"))
    mains = [i for i, cell in enumerate(cells) if "def main(_):" in cell]
    if len(mains) != 2:
        raise ValueError(f"expected 2 cells with def main(_), found {len(mains)}")
    scripts = {}
    for mode, index in zip(("async", "sync"), mains, strict=True):
        flags_cell = cells[index - 1] if "FLAGS" not in cells[index].split("def main")[0] else ""
        source = imports + "\n" + flags_cell + "\n" + cells[index]
        ast.parse(source)  # the extraction kept whole statements
        scripts[mode] = source
    return scripts


def replace_once(source: str, old: str, new: str) -> str:
    if source.count(old) != 1:
        raise ValueError(f"expected {old!r} exactly once in the seed script, found {source.count(old)}")
    return source.replace(old, new)


def corrected(source: str, *, data_dir: str, n_epochs: int) -> str:
    """The seed script with its known bugs fixed and the two documented test-time substitutions."""
    # Known bug: sys.exit('0') prints '0' and exits with status 1.
    source = replace_once(source, "sys.exit('0')", "sys.exit(0)")
    # Known bug (sync only): chief_init_op and local_step_init_op are attributes, not methods.
    if "chief_init_op()" in source:
        source = replace_once(source, "optimizer.chief_init_op()", "optimizer.chief_init_op")
        source = replace_once(source, "optimizer.local_step_init_op()", "optimizer.local_step_init_op")
    # Test-time substitutions: the data path, and fewer epochs than the book's 50 over 55,000 images.
    source = replace_once(source, "'/home/armando/datasets/mnist'", repr(data_dir))
    return replace_once(source, "n_epochs = 50", f"n_epochs = {n_epochs}")
