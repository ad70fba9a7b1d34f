"""The argparse tree of the groups commands: their options and the checks argparse makes (their help: :mod:`._groups_help`)."""

from __future__ import annotations

import argparse

from offsetstore.cli import _switch
from offsetstore.cli._adopt import ADOPT_HELP
from offsetstore.cli._command_parser import GroupsCommandParser
from offsetstore.cli._connect import DEFAULT_PORT, DEFAULT_SERVER, SERVER_ENV, TOKEN_ENV
from offsetstore.cli._groups_help import (
    BOOTSTRAP_HELP,
    BY_DURATION_HELP,
    CLAMP_HELP,
    DELETE_HELP,
    EXPECTED_GENERATION_HELP,
    EXPIRE_HELP,
    EXPORT_HELP,
    HISTORY_HELP,
    IDLE_FOR_HELP,
    IDLE_FOR_LIST_HELP,
    IMPORT_HELP,
    RESET_EXPORT_HELP,
    RESET_HELP,
    TO_CURRENT_HELP,
    TO_DATETIME_HELP,
)
from offsetstore.cli._profile import PROFILE_ENV
from offsetstore.cli._values import (
    int64,
    nonnegative_int,
    parse_by_duration,
    parse_datetime,
    parse_idle_for,
    parse_statuses,
    parse_topic_spec,
    positive_seconds,
)
from offsetstore.core.types import Boundary


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Adds the ``groups`` subcommands and their options to `parser`; `run` executes the result."""
    parser.description = "Inspect and manage consumer groups, like kafka-consumer-groups, through an offsetstore."
    _add_common_options(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _add_common_options(common, suppress=True)
    sub = parser.add_subparsers(
        dest="groups_command", required=True, metavar="COMMAND", parser_class=GroupsCommandParser
    )

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], help=summary, description=description)

    p = command("list", "list the groups", "List the groups with their generation, partitions, last commit and lag.")
    p.add_argument("--prefix", default="", help="only groups whose id starts with this")
    p.add_argument("--idle-for", type=parse_idle_for, metavar="DURATION", help=IDLE_FOR_LIST_HELP)
    p.add_argument(
        "--state",
        nargs="?",
        const="",
        type=parse_statuses,
        metavar="STATUS[,STATUS...]",
        help="with each group's status verdict (describes each group); given statuses, only the groups in one "
        "of them (OK, IDLE, LAGGING, STALLED, STOPPED, LOST, PAST_END, UNCONFIRMED), as kafka-consumer-groups "
        "--list --state",
    )

    p = command(
        "topics",
        "list a group's topics",
        "List the topics a group has offsets for, with their partition count, last commit and total lag "
        "(- where a log end is unknown). An unknown group has none.",
    )
    p.add_argument("group", metavar="GROUP")

    p = command(
        "describe",
        "show a group's offsets and lag",
        "Show each partition's committed offset, log end, lag, the group's latest member (CONSUMER-ID and "
        "HOST: the member id and peer of its latest JoinGroup), metadata and commit time (- where unknown; "
        "'earliest' and 'latest' are the placeholders -2 and -1). An unknown group is an error.",
    )
    _add_groups(p, "describe")
    view = p.add_mutually_exclusive_group()
    view.add_argument(
        "--members",
        action="store_true",
        help="the group's latest member (CONSUMER-ID, HOST), generation, last activity and partition count",
    )
    view.add_argument(
        "--state",
        action="store_true",
        help="the group's state (Empty, Stable or PastLogEnd), generation, resets, last activity and status "
        "verdict with its reason (OK, IDLE, LAGGING, STALLED, STOPPED, LOST, PAST_END, UNCONFIRMED)",
    )

    p = command("reset", "reset a group's offsets (dry run unless --execute)", RESET_HELP)
    _add_groups(p, "reset")
    _add_selection(p, required=True)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-offset", type=nonnegative_int, metavar="N", help="set every selected partition to N")
    target.add_argument(
        "--shift-by",
        type=int64,
        metavar="N",
        help="move each offset by N (negative allowed), floored at 0 and capped at the log end where it is "
        "known; a placeholder moves from its watermark, and stays as it is where none is known",
    )
    target.add_argument(
        "--to-earliest",
        dest="to_boundary",
        action="store_const",
        const=Boundary.EARLIEST,
        help="the log start where a watermark is known, else the -2 (earliest) placeholder",
    )
    target.add_argument(
        "--to-latest",
        dest="to_boundary",
        action="store_const",
        const=Boundary.LATEST,
        help="the log end where a watermark is known, else the -1 (latest) placeholder",
    )
    target.add_argument("--to-current", action="store_true", help=TO_CURRENT_HELP)
    target.add_argument("--to-datetime", type=parse_datetime, metavar="ISO8601", help=TO_DATETIME_HELP)
    target.add_argument("--by-duration", type=parse_by_duration, metavar="DURATION", help=BY_DURATION_HELP)
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help=BOOTSTRAP_HELP)
    p.add_argument("--clamp", action="store_true", help=CLAMP_HELP)
    p.add_argument("--export", action="store_true", help=RESET_EXPORT_HELP)
    p.add_argument("--expected-generation", type=nonnegative_int, metavar="N", help=EXPECTED_GENERATION_HELP)
    _add_execute(p)

    p = command("delete", "delete a group's offsets (dry run unless --execute)", DELETE_HELP)
    _add_groups(p, "delete")
    _add_selection(p, required=True)
    _add_execute(p)

    p = command("history", "show a group's commits, resets, adoptions, deletes and expiries", HISTORY_HELP)
    p.add_argument("group", metavar="GROUP")
    _add_selection(p, required=False)
    p.add_argument("--since", type=parse_datetime, metavar="ISO8601", help="changes from this on (no offset = UTC)")
    p.add_argument("--until", type=parse_datetime, metavar="ISO8601", help="changes before this (no offset = UTC)")
    p.add_argument(
        "--limit", type=nonnegative_int, default=100, metavar="N", help="at most N changes (default 100, 0 = all)"
    )

    p = command("export", "write a group's offsets as CSV, as Spark startingOffsets or to a Kafka group", EXPORT_HELP)
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--file", metavar="FILE", help="write to FILE instead of standard output")
    p.add_argument(
        "--format",
        choices=("csv", "spark"),
        default="csv",
        help="csv: kafka-consumer-groups' topic,partition,offset (default); spark: the JSON Spark's Kafka source "
        "takes as startingOffsets",
    )
    p.add_argument(
        "--to-kafka-group",
        metavar="KAFKA_GROUP",
        help="commit the offsets as Kafka group KAFKA_GROUP's instead (with --bootstrap-server; placeholders "
        "resolve to the broker's log start or end; dry run unless --execute; the Kafka group must be empty)",
    )
    p.add_argument(
        "--at",
        type=parse_datetime,
        metavar="ISO8601",
        help="the positions the group had at this instant, from its history (no offset = UTC), instead of its "
        "current ones: where to restart a pipeline (an observed Spark query's or Kafka group's) from that point",
    )
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="the Kafka cluster of --to-kafka-group")
    _add_execute(p)

    p = command("adopt", "take positions over from a Kafka group, a Spark checkpoint or a file", ADOPT_HELP)
    p.add_argument("group", metavar="GROUP", help="the offsetstore group that takes the positions over")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--from-kafka-group",
        metavar="KAFKA_GROUP",
        help="the offsets Kafka's group KAFKA_GROUP has committed (with --bootstrap-server)",
    )
    source.add_argument(
        "--from-spark-checkpoint",
        metavar="DIR",
        help="the end offsets of the last batch of a Structured Streaming checkpoint that has a commit",
    )
    source.add_argument(
        "--from-observed",
        action="store_true",
        help="GROUP's own last observed positions: an observed group (a Spark query's or a Kafka group's, "
        "recorded by ObserveOffsets) becomes a committed one, in one step",
    )
    source.add_argument(
        "--from-file",
        metavar="FILE",
        help="kafka-consumer-groups' CSV: topic,partition,offset, or group,topic,partition,offset (GROUP's lines, "
        "or --file-group's)",
    )
    p.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        help="the Kafka cluster: where --from-kafka-group lives, and whose log start and end the dry run shows "
        "(else the store's known watermarks)",
    )
    p.add_argument(
        "--file-group",
        metavar="KAFKA_GROUP",
        help="with a group,topic,partition,offset --from-file (kafka-consumer-groups --all-groups --export): "
        "adopt KAFKA_GROUP's lines into GROUP (default: GROUP's own lines)",
    )
    _add_selection(p, required=False)
    p.add_argument("--clamp", action="store_true", help=CLAMP_HELP)
    p.add_argument("--expected-generation", type=nonnegative_int, metavar="N", help=EXPECTED_GENERATION_HELP)
    _add_execute(p)

    _switch.configure(command)

    p = command("expire", "expire the offsets of idle groups (dry run unless --execute)", EXPIRE_HELP)
    p.add_argument("--idle-for", type=parse_idle_for, metavar="DURATION", required=True, help=IDLE_FOR_HELP)
    p.add_argument("--prefix", default="", help="only groups whose id starts with this")
    _add_execute(p)

    p = command("import", "set a group's offsets from a CSV file (dry run unless --execute)", IMPORT_HELP)
    p.usage = "%(prog)s [options] [--clamp] [--dry-run | --execute] [GROUP] FILE"
    p.add_argument(
        "operands",
        nargs="+",
        metavar="[GROUP] FILE",
        help="the group to set the offsets of, and the file (no GROUP: the file's group column names them)",
    )
    p.add_argument("--group", metavar="GROUP", help=argparse.SUPPRESS)  # the older 'import FILE --group GROUP'
    p.add_argument("--clamp", action="store_true", help=CLAMP_HELP)
    _add_execute(p)


def connection_parser() -> argparse.ArgumentParser:
    """The options that say where and how to reach the server, alone (the completion's group names)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    _add_common_options(parser, suppress=False)
    return parser


def _add_common_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    # The options are accepted both before and after the subcommand. On the subcommand they
    # default to SUPPRESS, because a subparser's defaults would overwrite a value given before it.
    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument(
        "--server",
        metavar="HOST:PORT",
        default=default(None),
        help=f"offsetstore server to talk to (env {SERVER_ENV}, default {DEFAULT_SERVER}; the port defaults to {DEFAULT_PORT})",
    )
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=positive_seconds,
        default=default(None),
        help="deadline of each call to the server (default: the client's, 10 seconds)",
    )
    parser.add_argument(
        "--output",
        choices=("table", "json"),
        default=default(None),
        help="a readable table (default), or one JSON document with the contract's field names",
    )
    parser.add_argument(
        "--tls", action="store_true", default=default(False), help="talk TLS, trusting the system's CA certificates"
    )
    parser.add_argument(
        "--tls-ca", metavar="PEM", default=default(None), help="talk TLS, trusting the CA certificates in this file"
    )
    parser.add_argument(
        "--tls-cert", metavar="PEM", default=default(None), help="client certificate for mutual TLS (with --tls-key)"
    )
    parser.add_argument("--tls-key", metavar="PEM", default=default(None), help="private key of --tls-cert")
    parser.add_argument(
        "--token",
        default=default(None),
        help=f"bearer token to send (env {TOKEN_ENV}, which other users of the machine cannot see, unlike this option)",
    )
    parser.add_argument(
        "--token-file", metavar="FILE", default=default(None), help="read the bearer token from the first line of FILE"
    )
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        default=default(None),
        help=f"a profile of these options as key=value lines (server, timeout, output, tls, tls-ca, tls-cert, "
        f"tls-key, token, token-file), like kafka-consumer-groups' --command-config; env {PROFILE_ENV}. "
        "Options given here win over it, and it over OFFSETSTORE_SERVER and OFFSETSTORE_TOKEN",
    )


def _add_selection(parser: argparse.ArgumentParser, *, required: bool) -> None:
    topic = {
        "dest": "topics",
        "action": "append",
        "type": parse_topic_spec,
        "metavar": "TOPIC[:P,...]",
        "help": "TOPIC or TOPIC:P,P,... (repeatable); a topic alone selects all of its partitions",
    }
    if not required:
        parser.add_argument("--topic", **{**topic, "help": topic["help"] + " (default: every topic)"})
        return
    selection = parser.add_mutually_exclusive_group(required=True)
    selection.add_argument("--topic", **topic)
    selection.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")


def _add_groups(parser: argparse.ArgumentParser, verb: str) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("group", metavar="GROUP", nargs="?", help=f"the group to {verb}")
    which.add_argument(
        "--group",
        dest="groups",
        action="append",
        metavar="GROUP",
        help=f"{verb} this group; repeat for several, as kafka-consumer-groups takes them (--output json then "
        "writes a list, as with --all-groups)",
    )
    which.add_argument("--all-groups", action="store_true", help=f"{verb} every group (one after another)")


def _add_execute(parser: argparse.ArgumentParser) -> None:
    # One dest with explicit constants: a store_true and a store_false on one dest would
    # fight over its default.
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--dry-run",
        dest="execute",
        action="store_const",
        const=False,
        default=False,
        help="show what would change and change nothing (the default)",
    )
    mode.add_argument("--execute", dest="execute", action="store_const", const=True, help="apply the change")
