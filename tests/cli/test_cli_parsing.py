"""The parts of ``offsetstore groups`` that need no server: option values, import files, tables, errors."""

from __future__ import annotations

import argparse
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from importlib import metadata
from pathlib import Path

import pytest

from offsetstore.cli import groups as cli
from offsetstore.cli.groups import (
    _error_message,
    _format_table,
    _merge_topic_specs,
    _offset_cell,
    _OffsetsFileError,
    _parse_datetime,
    _parse_duration,
    _parse_offsets_csv,
    _parse_topic_spec,
    _table_time,
)
from offsetstore.client import (
    Boundary,
    FieldViolation,
    GroupNotFoundError,
    InvalidArgumentError,
    StaleGenerationError,
    TopicPartition,
)

UTC = UTC
# Nothing listens on port 1 of the loopback interface: a connection is refused at once.
NOWHERE = "127.0.0.1:1"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="offsetstore groups")
    cli.configure_parser(parser)
    return parser.parse_args(argv)


# --- topic specs ---


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("orders", ("orders", ())),
        ("orders:0,1", ("orders", (0, 1))),
        ("orders:7", ("orders", (7,))),
        ("orders:2,0,2", ("orders", (0, 2))),
        ("orders: 1, 3", ("orders", (1, 3))),
        ("my.topic_v2-x:0", ("my.topic_v2-x", (0,))),
    ],
)
def test_topic_spec(spec: str, expected: tuple[str, tuple[int, ...]]) -> None:
    assert _parse_topic_spec(spec) == expected


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ("orders:x", "invalid partition 'x'"),
        (":1", "invalid topic ':1'"),
        ("bad topic", "invalid topic 'bad topic'"),
        ("orders:", "invalid partition ''"),
        ("orders:1,,2", "invalid partition ''"),
        ("orders:-1", "invalid partition '-1'"),
        ("orders:2147483648", "invalid partition '2147483648'"),
        ("", "invalid topic ''"),
        ("t" * 250, "invalid topic"),
    ],
)
def test_bad_topic_spec(spec: str, complaint: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as info:
        _parse_topic_spec(spec)
    assert complaint in str(info.value)


def test_longest_topic_is_accepted() -> None:
    assert _parse_topic_spec("t" * 249) == ("t" * 249, ())


def test_repeated_topics_merge_and_a_whole_topic_wins() -> None:
    specs = [("orders", (0,)), ("orders", (3, 1)), ("payments", (2,)), ("payments", ()), ("audit", ())]
    assert _merge_topic_specs(specs) == {"orders": [0, 1, 3], "payments": [], "audit": []}


def test_topic_option_repeats_on_the_command_line() -> None:
    args = parse("reset", "g", "--topic", "orders:0,1", "--topic", "payments", "--to-offset", "5")
    assert args.topics == [("orders", (0, 1)), ("payments", ())]
    assert _merge_topic_specs(args.topics) == {"orders": [0, 1], "payments": []}


# --- durations ---


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PT1H30M", timedelta(hours=1, minutes=30)),
        ("P1D", timedelta(days=1)),
        ("P2DT3H4M", timedelta(days=2, hours=3, minutes=4)),
        ("PT20.345S", timedelta(seconds=20, milliseconds=345)),
        ("PT45S", timedelta(seconds=45)),
        ("pt15m", timedelta(minutes=15)),
        ("90s", timedelta(seconds=90)),
        ("15m", timedelta(minutes=15)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("0s", timedelta(0)),
    ],
)
def test_duration(text: str, expected: timedelta) -> None:
    assert _parse_duration(text) == expected


@pytest.mark.parametrize(
    "text", ["", "garbage", "P", "PT", "P1DT", "1M", "1.5h", "-PT1H", "P1W", "P1Y", "PT1H30", "h", "30 m", "P99999999D"]
)
def test_bad_duration(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as info:
        _parse_duration(text)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize(
    "option", [("list", "--idle-for"), ("expire", "--idle-for"), ("reset", "g", "--all-topics", "--by-duration")]
)
def test_every_duration_option_takes_the_same_forms(
    option: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 59: --idle-for took bare seconds and no ISO 8601, --by-duration the reverse."""
    dest = option[-1].lstrip("-").replace("-", "_")
    for text, expected in (
        ("PT15M", timedelta(minutes=15)),
        ("15m", timedelta(minutes=15)),
        ("P7D", timedelta(days=7)),
    ):
        assert getattr(parse(*option, text), dest) == expected
    with pytest.raises(SystemExit) as info:
        parse(*option, "15")
    assert info.value.code == 2
    assert f"argument {option[-1]}: invalid duration '15': give a unit, e.g. 15s, 15m" in capsys.readouterr().err


# --- date-times ---


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-01-31T10:00:00.000", datetime(2024, 1, 31, 10, 0, tzinfo=UTC)),
        ("2024-01-31T10:00:00.250", datetime(2024, 1, 31, 10, 0, 0, 250_000, tzinfo=UTC)),
        ("2024-01-31T10:00:00Z", datetime(2024, 1, 31, 10, 0, tzinfo=UTC)),
        ("2024-01-31T10:00:00.000+02:00", datetime(2024, 1, 31, 8, 0, tzinfo=UTC)),
        ("2024-01-31T10:00:00-05:30", datetime(2024, 1, 31, 15, 30, tzinfo=UTC)),
        ("2024-01-31", datetime(2024, 1, 31, tzinfo=UTC)),
    ],
)
def test_datetime(text: str, expected: datetime) -> None:
    value = _parse_datetime(text)
    assert value == expected
    assert value.utcoffset() == timedelta(0)


@pytest.mark.parametrize("text", ["", "yesterday", "2024-13-01T00:00:00", "2024-01-31T25:00:00", "31/01/2024"])
def test_bad_datetime(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as info:
        _parse_datetime(text)
    assert "ISO 8601" in str(info.value)


# --- import files ---


def test_csv() -> None:
    lines = ["orders,0,15\n", "orders,1,0\n", "payments,3,42\n"]
    assert _parse_offsets_csv(lines) == {
        TopicPartition("orders", 0): 15,
        TopicPartition("orders", 1): 0,
        TopicPartition("payments", 3): 42,
    }


def test_csv_tolerates_a_header_blank_lines_spaces_and_crlf() -> None:
    lines = ["\n", "topic,partition,offset\r\n", "orders, 0, 15\r\n", "   \n", "orders,1,20"]
    assert _parse_offsets_csv(lines) == {TopicPartition("orders", 0): 15, TopicPartition("orders", 1): 20}


def test_csv_header_only_as_first_line() -> None:
    with pytest.raises(_OffsetsFileError) as info:
        _parse_offsets_csv(["orders,0,1", "topic,partition,offset"], "plan.csv")
    assert info.value.problems == [(2, "invalid partition 'partition': must be an integer >= 0")]


def test_csv_reports_each_malformed_line_by_number() -> None:
    lines = ["orders,0,1", "", "orders,x,1", "orders,1", "bad topic,1,1", "orders,2,ten", "orders,3,4,5"]
    with pytest.raises(_OffsetsFileError) as info:
        _parse_offsets_csv(lines, "plan.csv")
    assert [n for n, _ in info.value.problems] == [3, 4, 5, 6, 7]
    message = str(info.value)
    assert "plan.csv: line 3: invalid partition 'x'" in message
    assert "plan.csv: line 4: expected topic,partition,offset, got 'orders,1'" in message
    assert "plan.csv: line 5: invalid topic 'bad topic'" in message
    assert "plan.csv: line 6: invalid offset 'ten'" in message


def test_csv_takes_placeholders_as_export_writes_them() -> None:
    assert _parse_offsets_csv(["orders,0,5", "orders,1,-2", "orders,2,-1"]) == {
        TopicPartition("orders", 0): 5,
        TopicPartition("orders", 1): -2,
        TopicPartition("orders", 2): -1,
    }


def test_csv_rejects_other_negative_offsets_and_duplicates() -> None:
    with pytest.raises(_OffsetsFileError) as info:
        _parse_offsets_csv(["orders,0,5", "orders,1,-7", "orders,0,6"])
    assert info.value.problems == [
        (2, "invalid offset '-7': must be an integer >= 0, or -2 (earliest) or -1 (latest)"),
        (3, "orders:0 already given on line 1"),
    ]


@pytest.mark.parametrize("lines", [[], ["", "  "], ["topic,partition,offset"]])
def test_csv_without_offsets_is_rejected(lines: list[str]) -> None:
    with pytest.raises(_OffsetsFileError) as info:
        _parse_offsets_csv(lines, "empty.csv")
    assert str(info.value) == "empty.csv: no offsets to import"


def test_import_of_a_bad_file_fails_before_calling_the_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.csv"
    plan.write_text("orders,0,5\norders,1,-3\n")
    assert cli.main(["import", str(plan), "--group", "g", "--execute", "--server", NOWHERE]) == 1
    err = capsys.readouterr().err
    assert f"{plan}: line 2: invalid offset '-3'" in err
    assert "Nothing was imported." in err
    assert "cannot reach" not in err


def test_import_of_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.csv"
    assert cli.main(["import", str(missing), "--group", "g", "--server", NOWHERE]) == 1
    assert capsys.readouterr().err == f"Error: cannot read {missing}: No such file or directory\n"


# --- tables and cells ---


def test_table_aligns_columns_and_strips_trailing_space() -> None:
    table = _format_table(
        ("GROUP", "TOPIC", "PARTITION", "LAG"),
        [("orders-etl", "orders", 0, 85), ("g", "a-much-longer-topic", 12, "-")],
    )
    assert table == (
        "GROUP       TOPIC                PARTITION  LAG\n"
        "orders-etl  orders               0          85\n"
        "g           a-much-longer-topic  12         -"
    )


def test_table_without_rows_is_its_header() -> None:
    assert _format_table(("GROUP", "GENERATION"), []) == "GROUP  GENERATION"


def test_cells() -> None:
    assert _table_time(datetime(2024, 1, 31, 10, 0, 0, 123_999, tzinfo=UTC)) == "2024-01-31T10:00:00.123Z"
    assert _table_time(datetime(2024, 1, 31, 12, 0, tzinfo=timezone(timedelta(hours=2)))) == "2024-01-31T10:00:00.000Z"
    assert _table_time(None) == "-"
    # A table's time reads back as the same instant (to the millisecond).
    assert _parse_datetime(_table_time(datetime(2024, 5, 1, 8, 30, 1, 5000, tzinfo=UTC))) == datetime(
        2024, 5, 1, 8, 30, 1, 5000, tzinfo=UTC
    )
    assert [_offset_cell(v) for v in (42, 0, -1, -2)] == ["42", "0", "-", "earliest"]
    assert _offset_cell(-1, stored=True) == "latest"


# --- the parser ---


def test_reset_is_a_dry_run_unless_execute() -> None:
    assert parse("reset", "g", "--all-topics", "--to-earliest").execute is False
    assert parse("reset", "g", "--all-topics", "--to-earliest", "--dry-run").execute is False
    assert parse("reset", "g", "--all-topics", "--to-earliest", "--execute").execute is True


def test_reset_targets() -> None:
    assert parse("reset", "g", "--all-topics", "--shift-by", "-5").shift_by == -5
    assert parse("reset", "g", "--all-topics", "--to-latest").to_boundary is Boundary.LATEST
    assert parse("reset", "g", "--all-topics", "--to-earliest").to_boundary is Boundary.EARLIEST
    args = parse("reset", "g", "--topic", "orders", "--to-datetime", "2024-01-31T10:00:00.000")
    assert args.to_datetime == datetime(2024, 1, 31, 10, tzinfo=UTC)
    assert parse("reset", "g", "--all-topics", "--by-duration", "PT1H").by_duration == timedelta(hours=1)
    assert parse("reset", "g", "--all-topics", "--to-current").to_current is True


def test_delete_is_a_dry_run_unless_execute() -> None:
    assert parse("delete", "g", "--all-topics").execute is False
    assert parse("delete", "g", "--all-topics", "--execute").execute is True


def test_describe_takes_a_group_or_all_groups() -> None:
    assert (parse("describe", "g").group, parse("describe", "g").all_groups) == ("g", False)
    assert (parse("describe", "--all-groups").group, parse("describe", "--all-groups").all_groups) == (None, True)


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["describe", "g", "--bogus"], "describe"),
        (["reset", "g", "--all-topics", "--to-current", "--reset-offsets"], "reset"),
        (["delete", "g", "--all-topics", "--force"], "delete"),
        (["list", "--prefix", "p", "extra"], "list"),  # list --state takes a status since issue 36
    ],
)
def test_a_wrong_flag_is_said_by_its_command_in_two_lines(
    argv: list[str], command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        parse(*argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    # Issue 49: the error first and alone, not below twelve lines of usage; --help has the usage.
    assert err.startswith(f"offsetstore groups {command}: error: unrecognized arguments: ")
    assert err.splitlines()[1:] == [f"See 'offsetstore groups {command} --help' for its options."]


@pytest.mark.parametrize(
    "argv",
    [
        ["reset", "g", "--all-topics"],  # no target
        ["reset", "g", "--to-offset", "1"],  # no selection
        ["reset", "g", "--all-topics", "--to-offset", "1", "--to-latest"],  # two targets
        ["reset", "g", "--all-topics", "--topic", "orders", "--to-offset", "1"],  # two selections
        ["reset", "g", "--all-topics", "--to-offset", "-1"],
        ["reset", "g", "--all-topics", "--to-offset", "1", "--dry-run", "--execute"],
        ["reset", "g", "--all-topics", "--by-duration", "soon"],
        ["delete", "g"],  # delete needs an explicit selection
        ["delete", "g", "--all-topics", "--dry-run", "--execute"],
        ["describe"],  # a group or --all-groups
        ["describe", "g", "--all-groups"],
        ["reset", "g", "--all-topics", "--to-current", "--shift-by", "1"],
        ["import", "g", "plan.csv", "more.csv"],
        ["describe", "g", "--group", "h"],  # GROUP or --group, not both
        ["list", "--output", "yaml"],
        ["list", "--timeout", "0"],
        [],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse(*argv)
    assert info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_common_options_go_before_or_after_the_command() -> None:
    args = parse("--server", "a:1", "--output", "json", "--timeout", "2.5", "list")
    assert (args.server, args.output, args.timeout) == ("a:1", "json", 2.5)
    args = parse("--server", "a:1", "list", "--server", "b:2")
    # None: not given, so a --command-config profile may say it; a table otherwise.
    assert (args.server, args.output, args.timeout) == ("b:2", None, None)
    args = parse("history", "g")
    assert (args.server, args.limit, args.topics, args.since) == (None, 100, None, None)


# --- errors ---


def test_unreachable_server_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OFFSETSTORE_SERVER", NOWHERE)
    assert cli.main(["describe", "g"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"Error: cannot reach the offsetstore server at {NOWHERE}: ")
    assert "--server or OFFSETSTORE_SERVER" in captured.err
    assert "Traceback" not in captured.err


def test_error_messages() -> None:
    args = argparse.Namespace(group="orders-etl")
    missing = GroupNotFoundError("no such group")
    assert _error_message(missing, args, NOWHERE) == "Error: group orders-etl does not exist."
    stale = StaleGenerationError("generation 3 is stale", metadata={"current_generation": "5"})
    assert _error_message(stale, args, NOWHERE).startswith("Error: generation 3 is stale (current generation 5).")
    # The server's own message names the current generation: the CLI does not say it twice (issue 59).
    said = StaleGenerationError(
        "generation 3 of group 'orders-etl' is stale; the current generation is 5", metadata={"current_generation": "5"}
    )
    assert _error_message(said, args, NOWHERE).startswith(
        "Error: generation 3 of group 'orders-etl' is stale; the current generation is 5. Another writer"
    )
    one = InvalidArgumentError.field("group_id", "must not be empty")
    assert _error_message(one, args, NOWHERE) == "Error: group_id: must not be empty"
    many = InvalidArgumentError(
        "2 invalid fields",
        violations=[FieldViolation("topics[0].topic", "bad"), FieldViolation("to_offset", "must be >= 0")],
    )
    assert _error_message(many, args, NOWHERE) == (
        "Error: 2 invalid fields\n  topics[0].topic: bad\n  to_offset: must be >= 0"
    )


def test_version_prints_the_installed_version_and_exits_0() -> None:
    done = subprocess.run([sys.executable, "-m", "offsetstore.cli.main", "--version"], capture_output=True, text=True)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (
        0,
        f"offsetstore {metadata.version('offsetstore')}",
        "",
    )


# --- usage errors of every command: two lines (issue 59) ---


@pytest.mark.parametrize(
    ("argv", "first", "second"),
    [
        # A long usage: the error first, and where the usage is (as each groups command, issue 49).
        (
            ["groups"],
            "offsetstore groups: error: the following arguments are required: COMMAND",
            "See 'offsetstore groups --help'",
        ),
        (
            ["groups", "frobnicate"],
            "offsetstore groups: error: argument COMMAND: invalid choice: 'frobnicate'",
            "See 'offsetstore groups --help'",
        ),
        (
            ["groups", "list", "--bogus"],
            "offsetstore groups list: error: unrecognized arguments: --bogus",
            "See 'offsetstore groups list --help'",
        ),
        # A one-line usage: argparse's own two lines, the command's usage (not the top level's) and the error.
        (
            ["token", "--bogus"],
            "usage: offsetstore token [-h] [--hash]",
            "offsetstore token: error: unrecognized arguments: --bogus",
        ),
        (
            ["completion"],
            "usage: offsetstore completion [-h] {bash}",
            "offsetstore completion: error: name the shell to complete for: offsetstore completion bash",
        ),
        (
            ["bogus"],
            "usage: offsetstore [-h] [--version] COMMAND ...",
            "offsetstore: error: argument COMMAND: invalid choice: 'bogus'",
        ),
    ],
)
def test_a_usage_error_is_two_lines_of_the_command_that_was_wrong(
    argv: list[str], first: str, second: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from offsetstore.cli import main as cli_main

    with pytest.raises(SystemExit) as info:
        cli_main.main(argv)
    assert info.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(first) and lines[1].startswith(second), lines
    assert "required: shell" not in lines[1]


def test_groups_help_says_the_history_holds_adoptions(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 59: 'history' was 'commits, resets and deletes' though adoptions and expiries are in it too."""
    from offsetstore.cli import main as cli_main

    for argv in (["groups", "--help"], ["groups", "history", "--help"]):
        with pytest.raises(SystemExit):
            cli_main.main(argv)
        text = " ".join(capsys.readouterr().out.split())
        assert "adoptions" in text and "expiries" in text, argv


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([], "give a GROUP or --all-groups"),
        (["g", "--all-groups", "--prefix", "p"], "give a GROUP or --all-groups"),
        (["g", "--prefix", "p"], "select groups for --all-groups"),
        (["--all-groups"], "needs --from-cluster-id ID or --prefix P"),
    ],
)
def test_switch_takes_one_group_or_all_groups_of_a_cluster_or_prefix(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before any server or broker is asked (nothing listens on either)."""
    code = cli.main(["switch", *argv, "--to-bootstrap-server", NOWHERE, "--server", NOWHERE])
    assert (code, says in capsys.readouterr().err) == (2, True)
