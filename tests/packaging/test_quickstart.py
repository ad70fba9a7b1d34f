"""README's Quickstart names the quick subset first and gives measured times; the Makefile's ``test-quick`` is that subset (issue 49)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _quickstart() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.partition("## Quickstart")[2].partition("\n## ")[0]


def test_make_test_quick_leaves_out_the_slow_and_jvm_tests_only() -> None:
    makefile = (ROOT / "Makefile").read_text()
    [expression] = re.findall(r"^QUICK_MARKERS := (.+)$", makefile, re.M)
    # Each target may byte-compile first (the Makefile's BYTECODE), then runs pytest.
    compiled = r"(?:\t\$\(BYTECODE\)\n)?"
    assert re.search(
        rf"^test-quick: .*\n{compiled}\t\$\(PY\) -m pytest -m \"\$\(QUICK_MARKERS\)\" \$\(PYTEST_ARGS\)$",
        makefile,
        re.M,
    )
    # make test stays whole: two workers run all but the tests marked alone, then those run by themselves.
    recipe = makefile.partition("\ntest: ")[2].partition("\n\n")[0]
    runs = re.findall(r"\$\(PY\) -m pytest (.+?) \$\(PYTEST_ARGS\)", recipe)
    assert runs == ["-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --alone exclude", "--alone only"], runs
    left_out = set(re.findall(r"not (\w+)", expression))
    assert expression == " and ".join(f"not {m}" for m in sorted(left_out, key=expression.index))
    pytest_ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    registered = {m.partition(":")[0].strip() for m in pytest_ini["markers"]}
    assert left_out == registered == {"slow", "spark", "kafka", "flink"}


def test_the_quickstart_names_the_quick_subset_first_and_its_measured_times() -> None:
    text = _quickstart()
    block = text.partition("```sh\n")[2].partition("```")[0]
    tests = [line.split("#")[0].strip() for line in block.splitlines() if line.startswith("make test")]
    assert tests == ["make test-quick", "make test"], "the quick subset first, the whole suite after it"
    assert "whole test suite" in block.splitlines()[-1]
    assert re.search(r"`make run` from a fresh clone to serving took \*\*\d+ s\*\*", text)
    assert re.search(r"`make test-quick` is [\d,]+ of the suite's [\d,]+ tests", text)
