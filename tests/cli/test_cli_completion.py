"""``offsetstore completion bash``: the script bash runs, asked what it completes after each typed line."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")

# Completes the words of one command line (its last word the one being typed) as bash would.
_ASK = """
source <("$1" -m offsetstore.cli.main completion bash)
shift
COMP_WORDS=("$@")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
_offsetstore_complete
printf '%s\\n' "${COMPREPLY[@]}"
"""


def completions(line: str) -> list[str]:
    words = line.split(" ")
    done = subprocess.run(
        ["bash", "-c", _ASK, "ask", sys.executable, *words], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [word for word in done.stdout.splitlines() if word]


@pytest.mark.parametrize(
    ("line", "offered"),
    [
        ("offsetstore gr", ["groups"]),
        ("offsetstore groups re", ["reset"]),
        (
            "offsetstore groups reset g --to-",
            ["--to-offset", "--to-earliest", "--to-latest", "--to-current", "--to-datetime"],
        ),
        ("offsetstore groups describe --output ", ["table", "json"]),
        ("offsetstore --server h:1 groups describe --gr", ["--group"]),
        ("offsetstore serve --metrics-l", ["--metrics-listen"]),
        ("offsetstore completion ", ["bash", "--help"]),
        ("offsetstore --vers", ["--version"]),
    ],
)
def test_the_script_completes_commands_options_and_choices(line: str, offered: list[str]) -> None:
    assert completions(line) == offered


def test_an_option_that_takes_a_file_or_address_leaves_completion_to_bash() -> None:
    # Nothing offered: `complete -o default` then completes file names.
    assert completions("offsetstore groups import --tls-ca ") == []
    assert completions("offsetstore serve --listen ") == []


def test_state_completes_its_statuses() -> None:
    """Issue 49: ``--state`` took any word; its values are the verdicts."""
    assert completions("offsetstore groups list --state ") == [
        "LOST", "PAST_END", "STOPPED", "STALLED", "LAGGING", "UNCONFIRMED", "OK", "IDLE",
    ]  # fmt: skip
    assert completions("offsetstore groups list --state LA") == ["LAGGING"]
