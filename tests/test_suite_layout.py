"""The suite's own rule: a test never imports another test module; what tests share lives in tests/fixtures.

Two test modules importing helpers from others slipped in this release (STYLE.md, "Fixtures live
in tests/fixtures"); this reads every test file's imports so the next one fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def _imported(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return names


def _is_test_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "tests" and "fixtures" not in parts and any(p.startswith("test_") for p in parts[1:])


def test_no_test_module_imports_another() -> None:
    found = {
        str(path.relative_to(TESTS)): bad
        for path in sorted(TESTS.rglob("*.py"))
        if (bad := sorted({name for name in _imported(path) if _is_test_module(name)}))
    }
    assert found == {}, f"move what these share into tests/fixtures: {found}"
