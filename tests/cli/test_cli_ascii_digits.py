"""The CLI reads numbers in ASCII digits only (issue 56, L6): int() took ١٢٣, fullwidth digits and 1_000."""

from __future__ import annotations

import argparse

import pytest

from offsetstore.cli import groups as cli
from offsetstore.cli.groups import _OffsetsFileError, _parse_offsets_csv
from offsetstore.core.types import TopicPartition

NOT_ASCII = ["١٢٣", "１２３", "1_000", "+5", "1e3"]


@pytest.mark.parametrize("offset", NOT_ASCII)
def test_an_offsets_file_with_an_offset_not_in_ascii_digits_is_refused(offset: str) -> None:
    with pytest.raises(_OffsetsFileError) as refused:
        _parse_offsets_csv([f"t,0,{offset}"], "plan.csv")
    assert refused.value.problems == [
        (
            1,
            f"invalid offset {offset!r}: must be an integer >= 0, or -2 (earliest) or -1 (latest); "
            "write it in ASCII digits 0-9 (no separators)",
        )
    ]


@pytest.mark.parametrize("partition", ["١", "１", "1_0"])
def test_an_offsets_file_with_a_partition_not_in_ascii_digits_is_refused(partition: str) -> None:
    with pytest.raises(_OffsetsFileError, match="invalid partition"):
        _parse_offsets_csv([f"t,{partition},5"], "plan.csv")


def test_ascii_offsets_and_the_placeholders_are_read() -> None:
    assert _parse_offsets_csv(["t,0,123", "t,1,-2", "t,2,-1"]) == {
        TopicPartition("t", 0): 123,
        TopicPartition("t", 1): -2,
        TopicPartition("t", 2): -1,
    }


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="offsetstore groups", exit_on_error=False)
    cli.configure_parser(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize("value", [*NOT_ASCII, " 12", "12\u00a0"])  # a file's fields are trimmed, an option's not
def test_a_numeric_option_not_in_ascii_digits_is_a_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        parse("reset", "g", "--all-topics", "--to-offset", value)
    assert done.value.code == 2
    assert f"invalid integer {value!r}: write it in ASCII digits 0-9 (no separators)" in capsys.readouterr().err
    assert parse("reset", "g", "--all-topics", "--to-offset", "123").to_offset == 123
