"""The argparse tree of the groups commands: their options, the checks argparse makes, and the help."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn

from offsetstore.cli import _switch
from offsetstore.cli._adopt import ADOPT_HELP
from offsetstore.cli._connect import DEFAULT_PORT, DEFAULT_SERVER, SERVER_ENV, TOKEN_ENV
from offsetstore.cli._errors import UsageError
from offsetstore.cli._offsets_file import import_operands
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

_RESET_HELP = (
    "Reset the selected partitions to one target, like kafka-consumer-groups --reset-offsets. As there, "
    "nothing changes without --execute. An applied reset bumps the group's generation, so live fenced "
    "consumers stop instead of overwriting it: unlike Kafka, resetting a live group is safe. In tables "
    "'earliest' and 'latest' are the placeholders -2 and -1, which a reader resolves to the log's start "
    "or end; - is no offset."
)
_TO_DATETIME_HELP = (
    "the offsets the group had committed at that instant, from its history (e.g. 2024-01-31T10:00:00.000, "
    "2024-01-31T10:00:00Z or ...+02:00; a time without a UTC offset is taken as UTC): the group's own past "
    "position, where a partition that had no offset then gets the earliest placeholder (a reset never "
    "deletes an offset). With --bootstrap-server it means what kafka-consumer-groups means: the offsets of "
    "the first records with a timestamp at or after it"
)
_BOOTSTRAP_HELP = (
    "a Kafka broker to ask, as kafka-consumer-groups does (the kafka extra): --to-datetime and --by-duration "
    "then mean record timestamps (each partition's first record at or after the instant, offsets_for_times; "
    "the log end where none is that recent), a whole --topic means every partition the broker has, and "
    "--to-offset is checked against the broker's log start and end"
)
_CLAMP_HELP = (
    "set an offset outside the known [log start, log end] to the nearer bound (kafka-consumer-groups "
    "clamps silently; offsetstore warns and sets what you asked unless you give --clamp)"
)
_EXPECTED_GENERATION_HELP = (
    "apply (or preview) the reset only while the group is at generation N, the one a --dry-run showed: "
    "if a consumer joined or another reset came in between, nothing changes and the command says the "
    "generation the group is at now (one group only)"
)
#: What every duration option takes (cli/_values.py parse_by_duration).
_DURATION_FORMS = "PnDTnHnMnS as kafka takes it (PT1H30M, P1D) or 90s, 15m, 2h, 1d (a unit is required)"
_BY_DURATION_HELP = (
    "like --to-datetime at now minus DURATION: the offsets the group had committed then, from its history. "
    + _DURATION_FORMS
)
_TO_CURRENT_HELP = (
    "keep each offset where it is (a placeholder resolves to a known watermark, an offset past a known "
    "log end is capped to it); applied, it only bumps the generation, which fences live writers"
)
_HISTORY_HELP = (
    "The group's audit trail, newest first: consumers' commits, resets (an import is one), adoptions with "
    "their source, deletes and expiries. In PREVIOUS and NEW, - is no offset; 'earliest' and 'latest' "
    "are the placeholders -2 and -1. The contract writes both 'no offset' and the latest placeholder as -1; "
    "the table tells them apart from the partition's change before, where it is listed."
)
_EXPORT_HELP = (
    "Write the group's offsets as topic,partition,offset lines with no header, the format of "
    "kafka-consumer-groups --reset-offsets --export, which 'import' and kafka-consumer-groups --from-file "
    "read back. Placeholders are written as their numbers (-2 earliest, -1 latest). --output json writes "
    "a JSON list instead."
)
_IMPORT_HELP = (
    "Set the offsets of a topic,partition,offset file (kafka-consumer-groups --from-file; FILE - reads "
    "standard input), as 'export' writes it. Blank lines and a topic,partition,offset header are skipped; "
    "a malformed line rejects the whole file. Offsets are >= 0, or the placeholders -2 (earliest) and -1 "
    "(latest), which are set by a reset to that end (so they resolve to a known watermark, as "
    "'reset --to-earliest' does). With --execute every offset of the file is set in one reset, which bumps "
    "the generation and so fences live writers; the history records it as a reset (no consumer's commit: "
    "the status verdict waits for the consumer). To record where the offsets came from, 'adopt --from-file' "
    "does the same with the file named as its source. Partitions not in the file "
    "keep their offsets. A group,topic,partition,offset file (kafka-consumer-groups' export of several "
    "groups, 'reset --export' of several) sets each group it names with 'import FILE', or only GROUP's "
    "lines with 'import GROUP FILE'."
)
_IDLE_FOR_HELP = f"groups with no commit, join or reset for this long: {_DURATION_FORMS}"
_IDLE_FOR_LIST_HELP = (
    "list instead the groups idle (no commit, join or reset) for this long, which 'expire' and the "
    f"server's --offsets-retention would expire (needs admin on --prefix): {_DURATION_FORMS}"
)
_EXPIRE_HELP = (
    "Expire the offsets of groups idle for --idle-for, as the server's --offsets-retention does (Kafka's "
    "offsets.retention.minutes): their offsets are removed and recorded in their history as "
    "CHANGE_KIND_EXPIRE; each group keeps its generation, so a rejoin gets a higher one. Nothing changes "
    "without --execute. At most 1000 groups, longest idle first; run again for more."
)
_RESET_EXPORT_HELP = (
    "write the plan (each selected partition's new offset) to standard output as CSV instead of the table, "
    "as kafka-consumer-groups --reset-offsets --export does: topic,partition,offset lines for one group, "
    "group,topic,partition,offset lines for several (--group repeated, --all-groups); notes go to standard "
    "error. With --dry-run (the default) it plans; with --execute it applies and writes what it set"
)
_DELETE_HELP = (
    "Delete the selected offsets (--all-topics deletes the group). Like 'reset' and 'import', and unlike "
    "kafka-consumer-groups, it only shows what it would delete until --execute is given."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Adds the ``groups`` subcommands and their options to `parser`; `run` executes the result."""
    parser.description = "Inspect and manage consumer groups, like kafka-consumer-groups, through an offsetstore."
    _add_common_options(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _add_common_options(common, suppress=True)
    sub = parser.add_subparsers(
        dest="groups_command", required=True, metavar="COMMAND", parser_class=_GroupsCommandParser
    )

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], help=summary, description=description)

    p = command("list", "list the groups", "List the groups with their generation, partitions, last commit and lag.")
    p.add_argument("--prefix", default="", help="only groups whose id starts with this")
    p.add_argument("--idle-for", type=parse_idle_for, metavar="DURATION", help=_IDLE_FOR_LIST_HELP)
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

    p = command("reset", "reset a group's offsets (dry run unless --execute)", _RESET_HELP)
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
    target.add_argument("--to-current", action="store_true", help=_TO_CURRENT_HELP)
    target.add_argument("--to-datetime", type=parse_datetime, metavar="ISO8601", help=_TO_DATETIME_HELP)
    target.add_argument("--by-duration", type=parse_by_duration, metavar="DURATION", help=_BY_DURATION_HELP)
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help=_BOOTSTRAP_HELP)
    p.add_argument("--clamp", action="store_true", help=_CLAMP_HELP)
    p.add_argument("--export", action="store_true", help=_RESET_EXPORT_HELP)
    p.add_argument("--expected-generation", type=nonnegative_int, metavar="N", help=_EXPECTED_GENERATION_HELP)
    _add_execute(p)

    p = command("delete", "delete a group's offsets (dry run unless --execute)", _DELETE_HELP)
    _add_groups(p, "delete")
    _add_selection(p, required=True)
    _add_execute(p)

    p = command("history", "show a group's commits, resets, adoptions, deletes and expiries", _HISTORY_HELP)
    p.add_argument("group", metavar="GROUP")
    _add_selection(p, required=False)
    p.add_argument("--since", type=parse_datetime, metavar="ISO8601", help="changes from this on (no offset = UTC)")
    p.add_argument("--until", type=parse_datetime, metavar="ISO8601", help="changes before this (no offset = UTC)")
    p.add_argument(
        "--limit", type=nonnegative_int, default=100, metavar="N", help="at most N changes (default 100, 0 = all)"
    )

    p = command("export", "write a group's offsets as CSV, as Spark startingOffsets or to a Kafka group", _EXPORT_HELP)
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
    p.add_argument("--clamp", action="store_true", help=_CLAMP_HELP)
    p.add_argument("--expected-generation", type=nonnegative_int, metavar="N", help=_EXPECTED_GENERATION_HELP)
    _add_execute(p)

    _switch.configure(command)

    p = command("expire", "expire the offsets of idle groups (dry run unless --execute)", _EXPIRE_HELP)
    p.add_argument("--idle-for", type=parse_idle_for, metavar="DURATION", required=True, help=_IDLE_FOR_HELP)
    p.add_argument("--prefix", default="", help="only groups whose id starts with this")
    _add_execute(p)

    p = command("import", "set a group's offsets from a CSV file (dry run unless --execute)", _IMPORT_HELP)
    p.usage = "%(prog)s [options] [--clamp] [--dry-run | --execute] [GROUP] FILE"
    p.add_argument(
        "operands",
        nargs="+",
        metavar="[GROUP] FILE",
        help="the group to set the offsets of, and the file (no GROUP: the file's group column names them)",
    )
    p.add_argument("--group", metavar="GROUP", help=argparse.SUPPRESS)  # the older 'import FILE --group GROUP'
    p.add_argument("--clamp", action="store_true", help=_CLAMP_HELP)
    _add_execute(p)


class CommandParser(argparse.ArgumentParser):
    """A command's parser: any usage error is reported by this command, in two lines.

    argparse hands a subcommand's unknown arguments back to the top-level parser, which
    would print its own usage, not the one of the command the user got wrong. And argparse
    prints a command's whole usage before its error: twelve lines for ``reset``, five for
    ``groups`` itself, above the one that says what is wrong. So every command of
    ``offsetstore`` says its errors in two lines: its usage and the error, argparse's own
    form, where the usage is one line; else the error first, and where the usage is.
    """

    def error(self, message: str) -> NoReturn:
        usage = self.format_usage()
        if usage.count("\n") == 1:
            self.exit(2, f"{usage}{self.prog}: error: {message}\n")
        self.exit(2, f"{self.prog}: error: {message}\nSee '{self.prog} --help' for its options.\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


class _GroupsCommandParser(CommandParser):
    """A groups command's parser, which also reads ``import``'s operands."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        if getattr(namespace, "operands", None) is not None:
            try:
                namespace.group, namespace.file = import_operands(namespace)
            except UsageError as error:
                self.error(str(error))
        return namespace, extras


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
