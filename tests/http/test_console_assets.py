"""The console's files as served: an icon of its own (no request for a /favicon.ico that 404s), and scripts that parse."""

from __future__ import annotations

import re
import shutil
import subprocess
from importlib import resources

import pytest

CONSOLE = resources.files("offsetstore.server.http") / "console"


def test_the_page_names_an_inline_icon() -> None:
    """Issue 49: without one, every page load asked for /favicon.ico and logged a 404."""
    page = (CONSOLE / "index.html").read_text()
    assert re.search(r'<link rel="icon" href="data:image/svg\+xml,', page), page


@pytest.mark.parametrize("script", ["app.js", "actions.js", "adopt.js"])
def test_the_scripts_parse(script: str) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    checked = subprocess.run([node, "--check", str(CONSOLE / script)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
