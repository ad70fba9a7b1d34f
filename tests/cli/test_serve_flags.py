"""``offsetstore serve``'s flags are made from the settings' fields: every field a flag with its default, env and help."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from offsetstore.cli import main as cli_main
from offsetstore.core.durations import parse_duration
from offsetstore.server.config import Settings

# Public API (CONTRACT.md, sections 5, 7 and 8): the flags `serve` had when they were written by hand.
PUBLIC_FLAGS = {
    "--data-dir", "--database-prepare", "--database-url", "--event-loop", "--grace-seconds", "--group-metrics-limit",
    "--grpc-handshake-timeout", "--max-connections", "--max-connections-per-peer",
    "--history-retention", "--http-allowed-hosts", "--http-listen", "--listen", "--log-format", "--log-level",
    "--maintenance-interval", "--max-calls-per-principal", "--max-groups-per-principal", "--max-message-bytes",
    "--max-partitions-per-principal", "--max-response-bytes", "--max-streams", "--max-workers", "--metrics-listen",
    "--metrics-series-limit", "--metrics-tls", "--migration-lock-timeout", "--mirror-interval",
    "--mirror-kafka-bootstrap", "--mirror-kafka-groups", "--no-migrate", "--offsets-retention", "--pool-size",
    "--principal-bytes-per-second", "--principal-history-rows-per-second", "--principal-partitions-per-second",
    "--processes", "--reflection",
    "--require-synchronous-replication", "--sql-api-roles", "--statement-timeout-ms", "--status-window",
    "--tls-cert", "--tls-client-ca", "--tls-key", "--tokens-file", "--trace-trust-callers",
    "--watermarks-kafka-bootstrap", "--watermarks-kafka-config", "--watermarks-kafka-groups",
    "--watermarks-kafka-interval", "--watermarks-kafka-max-partitions", "--watermarks-kafka-topics",
    "--write-flushers",
}  # fmt: skip
FLAG_LINE = re.compile(r"^  (--[a-z-]+)(?: \S+)?(?:\s+(.*))?$")
DEFAULT = re.compile(r"\(default ([^;]+?)(?:: this flag turns it o[nf]+)?; env (OFFSETSTORE_[A-Z_]+)(?:=1/0)?\)$")


def serve_help(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Each flag of ``serve --help`` -> its help, one line each (a wide terminal: no wrapping)."""
    monkeypatch.setenv("COLUMNS", "2000")
    with pytest.raises(SystemExit) as exited:
        cli_main.main(["serve", "--help"])
    assert exited.value.code == 0
    flags: dict[str, str] = {}
    flag = None
    for line in capsys.readouterr().out.splitlines():
        if found := FLAG_LINE.match(line):
            flag = found.group(1)
            flags[flag] = (found.group(2) or "").strip()
        elif flag and line.startswith(" " * 8):  # a long flag's help starts on the next line
            flags[flag] = f"{flags[flag]} {line.strip()}".strip()
        else:
            flag = None
    return flags


def expected_default(field: dataclasses.Field[object]) -> object:
    return field.default_factory() if field.default is dataclasses.MISSING else field.default  # type: ignore[misc]


def test_serve_help_lists_every_setting_with_its_default_and_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    flags = serve_help(capsys, monkeypatch)
    assert set(flags) == PUBLIC_FLAGS
    by_env = {}
    for flag, text in flags.items():
        found = DEFAULT.search(text)
        assert found, f"{flag}: no default and variable in {text!r}"
        by_env[found.group(2).removeprefix("OFFSETSTORE_").lower()] = (flag, found.group(1))
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    assert set(by_env) == set(fields), "a setting without a flag, or a flag without a setting"
    for name, (flag, shown) in by_env.items():
        field = fields[name]
        if field.default is dataclasses.MISSING:
            continue  # data_dir: computed at start, shown as its rule
        # What help prints is what the code does when neither the flag nor the variable is given.
        read = Settings.load({}, {}) if name != "database_url" else Settings(database_url=None)
        value = getattr(read, name)
        assert value == field.default, name
        if value is None:
            assert shown == "unset", flag
        elif isinstance(value, bool):
            assert shown == ("on" if value else "off"), flag
        elif value == "":
            assert shown == "empty", flag
        elif field.metadata["duration"]:
            assert shown == "0" and value == 0 or parse_duration(shown).total_seconds() == value, flag
        else:
            assert shown == str(value), flag


def test_each_flag_reads_into_its_setting() -> None:
    given = {
        "--pool-size": ("20", "pool_size", 20),
        "--history-retention": ("12h", "history_retention", 43200.0),
        "--tls-cert": ("c.pem", "tls_cert_file", Path("c.pem")),
        "--tls-key": ("k.pem", "tls_key_file", Path("k.pem")),
        "--metrics-tls": ("off", "metrics_tls", False),
        "--processes": ("3", "processes", 3),
        "--principal-history-rows-per-second": ("2.5", "principal_history_rows_per_second", 2.5),
    }
    argv = ["serve", "--no-migrate", "--trace-trust-callers"]
    argv += [item for flag, (raw, _, _) in given.items() for item in (flag, raw)]
    args = vars(cli_main._parser().parse_args(argv))
    settings = Settings.load({k: v for k, v in args.items() if k != "command"}, {})
    assert settings.migrate is False and settings.trace_trust_callers is True
    assert {name: getattr(settings, name) for _, name, _ in given.values()} == {
        name: value for _, name, value in given.values()
    }
    # Not given: None, so the environment still applies under the flags.
    unset = vars(cli_main._parser().parse_args(["serve"]))
    assert (
        Settings.load({k: v for k, v in unset.items() if k != "command"}, {"OFFSETSTORE_POOL_SIZE": "9"}).pool_size == 9
    )


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--pool-size", "many"], "argument --pool-size: invalid int value: 'many'"),
        (["--history-retention", "7x"], "argument --history-retention: "),
        (["--processes", "lots"], "argument --processes: expected a number or auto, got 'lots'"),
        (["--log-format", "xml"], "argument --log-format: invalid choice: 'xml'"),
        (["--event-loop", "trio"], "argument --event-loop: invalid choice: 'trio'"),
    ],
)
def test_a_flag_of_the_wrong_type_is_one_usage_line_and_one_error_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main.main(["serve", *argv])
    assert exited.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "usage: offsetstore serve [OPTIONS]", lines
    assert len(lines) == 2 and lines[1].startswith(f"offsetstore serve: error: {named}"), lines


def test_serve_help_needs_no_server_extra() -> None:
    # A client-only install (tests/packaging/test_distributions.py builds one, slowly): the
    # settings' declarations import nothing of the server extra.
    blocked = ("sqlalchemy", "psycopg", "psycopg_pool", "alembic", "prometheus_client", "grpc_reflection", "aiohttp")
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.partition('.')[0] in {blocked!r}:\n"
        "            raise ModuleNotFoundError(name, name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from offsetstore.cli.main import main\n"
        "main(['serve', '--help'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--pool-size" in done.stdout and "OFFSETSTORE_POOL_SIZE" in done.stdout
