"""docs/adopt.md as a user reads it: its commands parse, its checkpoint format is what ``adopt`` reads, its warnings are the CLI's."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from offsetstore.cli import main as cli_main
from offsetstore.client import Watermark
from tests.fixtures.doc_snippets import snippets

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "adopt.md"
COMMAND = re.compile(r"^\s*\$ (offsetstore groups .*?)(?:\s+#.*)?$", re.MULTILINE)


def commands() -> list[str]:
    return COMMAND.findall(GUIDE.read_text())


def test_the_guide_shows_each_source_and_each_way_out() -> None:
    text = " ".join(commands())
    for option in (
        "--from-spark-checkpoint",
        "--from-kafka-group",
        "--from-file",
        "--format spark",
        "--to-kafka-group",
    ):
        assert option in text, option


@pytest.mark.parametrize("line", commands())
def test_each_command_of_the_guide_parses(line: str) -> None:
    args = cli_main._parser().parse_args(shlex.split(line)[1:])
    assert args.command == "groups"


def test_the_spark_job_names_the_kafka_cluster() -> None:
    """Spark's Kafka source refuses a stream without it (tests/spark/test_adopt_spark.py runs the job itself)."""
    (job,) = [s for s in snippets(GUIDE, "python") if "ExactlyOnceSink" in s]
    assert '.option("kafka.bootstrap.servers", ' in job


def test_a_checkpoint_made_from_the_guides_words_is_adopted(client, groups, group_id, tmp_path) -> None:
    """The guide's sample ``offsets/41``, with the empty ``commits/41`` it says is enough, as a user would make them."""
    (entry,) = [s for s in snippets(GUIDE, "text") if s.startswith("v1\n")]
    checkpoint = tmp_path / "orders"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    (checkpoint / "offsets" / "41").write_text(entry)
    (checkpoint / "commits" / "41").touch()
    assert "an empty file is enough" in " ".join(GUIDE.read_text().split())

    done = groups("adopt", group_id, "--from-spark-checkpoint", str(checkpoint), "--execute")
    assert done.code == 0, done.err
    # What the guide says this entry sets.
    assert "sets `orders` partition 0 to 1234 and partition 1 to 1201" in " ".join(GUIDE.read_text().split())
    assert {tp: o.offset for tp, o in client.fetch_offsets(group_id).offsets.items()} == {
        ("orders", 0): 1234,
        ("orders", 1): 1201,
    }
    assert f"spark checkpoint {checkpoint} batch 41" in done.out


def test_execute_without_clamp_stores_an_offset_past_the_log_end_as_the_guide_says(
    client, groups, group_id, tmp_path
) -> None:
    guide = " ".join(GUIDE.read_text().split())
    assert "Without `--clamp`, `--execute` stores such an offset as the source gave it" in guide
    said = "1 offset(s) lie outside the log (NOTE): add --clamp to set the nearer bound instead."
    assert f"`{said}`" in guide
    topic = f"adopt-doc-{group_id[-8:]}"
    client.report_watermarks([Watermark(topic, 0, 0, 100)])
    plan = tmp_path / "positions.csv"
    plan.write_text(f"{topic},0,150\n")

    done = groups("adopt", group_id, "--from-file", str(plan), "--execute")
    assert done.code == 0, done.err
    assert "past the log end by 50" in done.out and said in done.out
    assert {tp: o.offset for tp, o in client.fetch_offsets(group_id).offsets.items()} == {(topic, 0): 150}

    clamped = groups("adopt", group_id, "--from-file", str(plan), "--clamp", "--execute")
    assert clamped.code == 0, clamped.err
    assert {tp: o.offset for tp, o in client.fetch_offsets(group_id).offsets.items()} == {(topic, 0): 100}
