"""The outcomes of one pytest run of a test file (read from its JUnit XML), and the pass rate against a baseline.

A test is named ``Class::method`` (pytest's JUnit ``classname`` less the module, then ``name``); its
outcome is passed, failed, error or skipped, with a one-line reason for all but passed. A file that
did not import has no tests of its own: every baseline test of it counts as failed with that reason.
"""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ElementTree

PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"
_REASON_CHARS = 240  # a reason is one line; past this it is cut


@dataclasses.dataclass
class FileRun:
    """One test file's run: each test's (outcome, reason), or why the file produced none."""

    tests: dict[str, tuple[str, str]]
    file_error: str = ""  # the file did not import or the run did not end: the one-line reason
    wall_s: float = 0.0

    def to_json(self) -> dict:
        tests = {name: {"outcome": outcome, "reason": reason} for name, (outcome, reason) in sorted(self.tests.items())}
        return {"tests": tests, "file_error": self.file_error, "wall_s": round(self.wall_s, 1)}

    @classmethod
    def from_json(cls, data: dict) -> FileRun:
        tests = {name: (test["outcome"], test["reason"]) for name, test in data["tests"].items()}
        return cls(tests=tests, file_error=data.get("file_error", ""), wall_s=data.get("wall_s", 0.0))

    def passed(self) -> set[str]:
        return {name for name, (outcome, _) in self.tests.items() if outcome == PASSED}


def one_line(text: str) -> str:
    """The text's first non-empty line, stripped and cut to a readable length."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    line = lines[0] if lines else "no reason given"
    return line if len(line) <= _REASON_CHARS else line[: _REASON_CHARS - 3] + "..."


def _reason(element: ElementTree.Element) -> str:
    """One line for a failure/error/skipped element: the raised exception's line where pytest shows one."""
    message = element.get("message") or ""
    exception_lines = [line[1:].strip() for line in (element.text or "").splitlines() if line.startswith("E ")]
    if message in ("", "collection failure") or message.startswith("failed on setup"):
        # pytest's own words; the "E   Type: text" lines of the traceback say what was raised
        return one_line(exception_lines[0] if exception_lines else message or element.text or "")
    return one_line(message)


def parse_junit(path: str, module: str) -> FileRun:
    """The tests of ``module`` (the file's name less .py) in pytest's JUnit XML at ``path``."""
    tests: dict[str, tuple[str, str]] = {}
    file_error = ""
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        classname = case.get("classname") or ""
        cls = classname[len(module) + 1 :] if classname.startswith(module + ".") else classname
        outcome, reason = PASSED, ""
        for kind in (ERROR, FAILED, SKIPPED):
            element = case.find("failure" if kind == FAILED else kind)
            if element is not None:
                outcome, reason = kind, _reason(element)
                break
        if not cls:  # a collection error: the file as a whole
            file_error = reason or "the file collected no tests"
            continue
        name = f"{cls}::{case.get('name')}"
        if tests.get(name, (PASSED, ""))[0] == PASSED:  # a test written twice (its teardown failed): the failure
            tests[name] = (outcome, reason)
    return FileRun(tests=tests, file_error=file_error)


@dataclasses.dataclass(frozen=True)
class FileRate:
    """One file: the tests passing on the baseline, those of them passing here, and why each other one did not."""

    module: str
    baseline_passed: int
    passed_here: int
    failures: tuple[tuple[str, str], ...]  # (test, one-line reason), baseline-passing tests only
    extra_passed: int  # passing here but not on the baseline (not counted in the rate)

    @property
    def rate(self) -> float:
        return self.passed_here / self.baseline_passed if self.baseline_passed else 0.0


def compare(module: str, baseline: FileRun, here: FileRun) -> FileRate:
    """The pass rate here over the tests of ``module`` that pass on the baseline."""
    expected = baseline.passed()
    passed = here.passed()
    failures = []
    for name in sorted(expected - passed):
        if name in here.tests:
            outcome, reason = here.tests[name]
            failures.append((name, f"{outcome}: {reason}"))
        else:
            failures.append((name, f"not run: {here.file_error or 'not in this run'}"))
    return FileRate(
        module=module,
        baseline_passed=len(expected),
        passed_here=len(expected & passed),
        failures=tuple(failures),
        extra_passed=len(passed - expected),
    )


def format_rates(rates: list[FileRate], baseline_name: str, here_name: str) -> str:
    """The table of pass rates per file and overall, then each failing test with its reason."""
    width = max([len(rate.module) for rate in rates] + [7])
    lines = [
        f"pass rate here ({here_name}) over the tests that pass on {baseline_name}",
        f"{'file':<{width}}  {'baseline':>8}  {'here':>5}  {'rate':>6}",
    ]
    for rate in rates:
        lines.append(f"{rate.module:<{width}}  {rate.baseline_passed:>8}  {rate.passed_here:>5}  {rate.rate:>6.1%}")
    total = sum(rate.baseline_passed for rate in rates)
    passed = sum(rate.passed_here for rate in rates)
    lines.append(f"{'overall':<{width}}  {total:>8}  {passed:>5}  {(passed / total if total else 0.0):>6.1%}")
    failures = [(rate.module, name, reason) for rate in rates for name, reason in rate.failures]
    if failures:
        lines.append(f"failing here ({len(failures)}):")
        lines.extend(f"  {module}::{name}: {reason}" for module, name, reason in failures)
    return "\n".join(lines)
