"""``groups switch``: move a group's positions to another Kafka cluster, dry run first (issue 58).

The plan is :func:`offsetstore.kafka_integration.switch.plan_switch`'s: per partition the offset on
A, the offset on B, the method that found it and how many records may be read again or are missing.
``--execute`` first fences the group (a JoinGroup: its writers on A stop at their next commit),
plans again from that fenced state, and applies the plan in one ResetOffsets with ``to_offsets``
and ``switch_to_cluster_id`` at that generation: the history records it as CHANGE_KIND_SWITCH with
both cluster ids, and the group is bound to B. It refuses while a partition has no target.
"""

from __future__ import annotations

import argparse
from typing import Any

from offsetstore.cli._errors import EXIT_ERROR, EXIT_OK, EXIT_USAGE, UsageError
from offsetstore.cli._render import Output
from offsetstore.cli._switch_all import partition_json, switch_all
from offsetstore.client import OffsetStoreClient

#: The command's description in its --help.
SWITCH_HELP = (
    "Move a group's positions to another Kafka cluster (a migration, or a MirrorMaker 2 replica). The dry run "
    "(the default) shows per partition the offset on the group's cluster, the offset on the cluster of "
    "--to-bootstrap-server, the method that found it (exact: the record the group's writer fingerprinted, "
    "found on B; offset-syncs: MirrorMaker 2's mm2-offset-syncs topic, conservative; timestamp: B's time "
    "index, conservative; identity: with --offset-preserving) and at most how many records are read again. "
    "With --from-bootstrap-server (cluster A, when it is reachable) it also counts the records A holds past "
    "the offset that B lacks; without it (A unreachable: a failover) MISSING is the gap from A's last log end "
    "the store saw (the watermark its consumer on A last reported), where the record is placed exactly: the "
    "records A held then past B's end (more may have been written after). --execute fences the group first "
    "(stop its consumers on A), plans again, and "
    "sets every offset in one reset recorded as CHANGE_KIND_SWITCH with both cluster ids; the group is then "
    "bound to B. Needs the kafka extra."
)


def configure(sub_command: Any) -> None:
    """Adds ``switch`` and its options (``sub_command`` is the groups parser's ``command`` helper)."""
    p = sub_command(
        "switch", "move a group's positions to another Kafka cluster (dry run unless --execute)", SWITCH_HELP
    )
    p.usage = (
        "%(prog)s [options] (GROUP | --all-groups (--from-cluster-id ID | --prefix P)) --to-bootstrap-server HOST:PORT"
    )
    p.add_argument("group", metavar="GROUP", nargs="?", help="the group to move")
    p.add_argument(
        "--all-groups",
        action="store_true",
        help="every group bound to --from-cluster-id and/or whose id starts with --prefix, each in its own fenced "
        "reset; a summary per group (one group refused does not stop the others: see docs/switch.md)",
    )
    p.add_argument("--from-cluster-id", metavar="ID", help="with --all-groups: the groups bound to this Kafka cluster")
    p.add_argument("--prefix", metavar="P", help="with --all-groups: the groups whose id starts with P")
    p.add_argument("--to-bootstrap-server", required=True, metavar="HOST:PORT", help="cluster B, where the group goes")
    p.add_argument(
        "--from-bootstrap-server",
        metavar="HOST:PORT",
        help="cluster A, the group's cluster, when reachable: counts the records B lacks, reads offset syncs kept there",
    )
    p.add_argument(
        "--topic-map",
        action="append",
        default=[],
        metavar="A=B",
        help="topic A is called B on cluster B (repeat per topic; before any replication policy)",
    )
    p.add_argument(
        "--replication-policy",
        choices=("default", "identity"),
        default="identity",
        help="MirrorMaker 2's naming of replicated topics: default (SOURCE-ALIAS.topic) or identity (the same name)",
    )
    p.add_argument("--source-alias", default="", metavar="ALIAS", help="cluster A's alias in MirrorMaker 2's config")
    p.add_argument(
        "--offset-preserving",
        action="store_true",
        help="B's copies keep A's offsets (replication that preserves offsets): the identity method may place a "
        "partition no better method placed",
    )
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait at most this long for a fingerprinted record that B does not hold yet (replication catching up)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", dest="execute", action="store_const", const=False, default=False, help="the default")
    mode.add_argument("--execute", dest="execute", action="store_const", const=True, help="fence the group and switch")


def _topic_map(specs: list[str]) -> dict[str, str]:
    found = {}
    for spec in specs:
        source, sep, target = spec.partition("=")
        if not sep or not source or not target:
            raise UsageError(f"--topic-map {spec!r}: give SOURCE=TARGET")
        found[source] = target
    return found


def _selection_error(args: argparse.Namespace) -> str:
    if args.all_groups == (args.group is not None):
        return "give a GROUP or --all-groups (one of them)"
    if not args.all_groups and (args.from_cluster_id is not None or args.prefix is not None):
        return "--from-cluster-id and --prefix select groups for --all-groups"
    if args.all_groups and not (args.from_cluster_id or args.prefix):
        return "--all-groups needs --from-cluster-id ID or --prefix P (or both)"
    return ""


def cmd_switch(client: OffsetStoreClient, args: argparse.Namespace, out: Output) -> int:
    try:
        # The kafka extra: confluent-kafka and the writer's side; the CLI works without it otherwise.
        from offsetstore.kafka_integration.switch import SwitchPlanner, plan_switch, topic_mapper
    except ImportError as error:
        out.error(f"Error: 'groups switch' needs the kafka extra (pip install 'offsetstore[kafka]'): {error}")
        return EXIT_ERROR
    try:
        name = topic_mapper(_topic_map(args.topic_map), args.replication_policy, args.source_alias)
    except (UsageError, ValueError) as error:
        out.error(f"Error: {error}")
        return EXIT_ERROR
    wrong = _selection_error(args)
    if wrong:
        out.error(f"Error: {wrong}")
        return EXIT_USAGE
    target = {"bootstrap.servers": args.to_bootstrap_server}
    source = {"bootstrap.servers": args.from_bootstrap_server} if args.from_bootstrap_server else None
    if args.all_groups:
        planner = SwitchPlanner(
            target, source=source, topic_name=name, offset_preserving=args.offset_preserving, wait_seconds=args.wait
        )
        return switch_all(client, args, out, planner)
    fenced = client.join_group(args.group, "offsetstore-switch") if args.execute else None
    description = client.describe_group(args.group)
    try:
        plan = plan_switch(
            description, target, source=source, topic_name=name, offset_preserving=args.offset_preserving,
            wait_seconds=args.wait,
        )  # fmt: skip
    except Exception as error:  # confluent-kafka's KafkaException and the plan's ValueError alike
        out.error(f"Error: cannot plan the switch: {error}")
        return EXIT_ERROR
    if plan.from_cluster_id == plan.to_cluster_id:
        out.error(f"Error: group {args.group} is on cluster {plan.to_cluster_id} already: nothing to switch")
        return EXIT_ERROR
    applied = None
    if args.execute:
        if plan.unplaced:
            names = ", ".join(f"{p.topic}:{p.partition}" for p in plan.unplaced)
            out.error(
                f"Error: no method placed {names} on cluster {plan.to_cluster_id}; nothing was switched (the group "
                f"was fenced at generation {fenced}: its consumers on the old cluster stopped)"
            )
            return EXIT_ERROR
        applied = client.reset_offsets(
            args.group,
            to_offsets=plan.to_offsets,
            source=plan.source,
            switch_to_cluster_id=plan.to_cluster_id,
            expected_generation=plan.generation,
        )
    rows = plan.partitions
    if out.json:
        out.document(
            {
                "group_id": plan.group_id,
                "from_cluster_id": plan.from_cluster_id,
                "to_cluster_id": plan.to_cluster_id,
                "generation": applied.generation if applied else plan.generation,
                "dry_run": applied is None,
                "partitions": [partition_json(p) for p in rows],
            }
        )
        return EXIT_OK
    what = "Switched" if applied else "Would switch (dry run; --execute applies)"
    out.line(f"{what} group {plan.group_id}: cluster {plan.from_cluster_id or '(none)'} -> {plan.to_cluster_id}")
    out.table(
        ("TOPIC", "PARTITION", "OFFSET-ON-A", "TOPIC-ON-B", "OFFSET-ON-B", "METHOD", "RE-READS", "MISSING", "NOTE"),
        (
            (
                p.topic,
                p.partition,
                p.source_offset,
                p.target_topic,
                p.target_offset if p.target_offset >= 0 else "-",
                p.method,
                "?" if p.rereads is None else p.rereads,
                "?" if p.missing is None else p.missing,
                p.note,
            )
            for p in rows
        ),
    )
    return EXIT_OK
