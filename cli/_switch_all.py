"""``groups switch --all-groups``: every group bound to a cluster (or whose id has a prefix) moved, one summary row each.

Each group is switched as ``groups switch GROUP`` switches one: fenced, planned again from the
fenced state, applied in one ResetOffsets of its own. Groups are independent: one refused (a
partition no method places, a writer that moved the generation on, an observed group, a Kafka
error) is named in its row and the next goes on; the groups switched before it stay switched.
The exit code is 1 when any was refused. Running the same command again picks up what is left,
since a switched group is bound to B and no longer matches ``--from-cluster-id`` (with only
``--prefix`` it shows as on B already).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from offsetstore.cli._errors import EXIT_ERROR, EXIT_OK
from offsetstore.cli._render import Output
from offsetstore.client import OffsetStoreClient
from offsetstore.core.errors import OffsetStoreError
from offsetstore.core.types import GroupDescription

if TYPE_CHECKING:
    from offsetstore.kafka_integration.switch import PartitionSwitch, SwitchPlan, SwitchPlanner

#: The member id the switch fences a group with (as ``groups switch GROUP`` does).
FENCE_MEMBER = "offsetstore-switch"


@dataclass
class GroupOutcome:
    """One group's row of the summary."""

    group_id: str
    from_cluster_id: str
    #: "would switch", "switched", "refused" or "on target already".
    status: str
    plan: SwitchPlan | None = None
    #: The group's generation after the switch (0 when not switched).
    generation: int = 0
    #: Why it was refused.
    reason: str = ""


def _groups(client: OffsetStoreClient, prefix: str) -> Iterator[Any]:
    token = ""
    while True:
        page = client.list_groups(prefix, page_token=token)
        yield from page.items
        token = page.next_page_token
        if not token:
            return


def _selected(description: GroupDescription, from_cluster_id: str | None) -> bool:
    return from_cluster_id is None or description.kafka_cluster_id == from_cluster_id


def _switch_one(
    client: OffsetStoreClient, summary: Any, args: argparse.Namespace, planner: SwitchPlanner
) -> GroupOutcome | None:
    """The group's outcome; None when it is not one of the selected groups."""
    group_id = summary.group_id
    description = client.describe_group(group_id)
    if not _selected(description, args.from_cluster_id):
        return None
    from_id = description.kafka_cluster_id
    if from_id and from_id == planner.to_cluster_id:
        return GroupOutcome(group_id, from_id, "on target already")
    if summary.observed:
        return GroupOutcome(group_id, from_id, "refused", reason="observed: adopt it first (groups adopt)")
    if not description.partitions:
        return GroupOutcome(group_id, from_id, "refused", reason="no offsets stored: nothing to switch")
    try:
        if args.execute:
            fenced = client.join_group(group_id, FENCE_MEMBER)
            description = client.describe_group(group_id)
            if not _selected(description, args.from_cluster_id):
                return GroupOutcome(
                    group_id, from_id, "refused", reason=f"rebound to {description.kafka_cluster_id} meanwhile"
                )
        plan = planner.plan(description)
        if plan.unplaced:
            names = ", ".join(f"{p.topic}:{p.partition}" for p in plan.unplaced)
            fence = f" (fenced at generation {fenced}: its consumers stopped)" if args.execute else ""
            return GroupOutcome(group_id, from_id, "refused", plan, reason=f"no method placed {names}{fence}")
        if not args.execute:
            return GroupOutcome(group_id, from_id, "would switch", plan)
        applied = client.reset_offsets(
            group_id,
            to_offsets=plan.to_offsets,
            source=plan.source,
            switch_to_cluster_id=plan.to_cluster_id,
            expected_generation=plan.generation,
        )
    except OffsetStoreError as error:
        return GroupOutcome(group_id, from_id, "refused", reason=f"{type(error).__name__}: {error}")
    except Exception as error:  # confluent-kafka's KafkaException, the plan's ValueError: this group only
        return GroupOutcome(group_id, from_id, "refused", reason=f"cannot plan: {error}")
    return GroupOutcome(group_id, from_id, "switched", plan, applied.generation)


def switch_all(client: OffsetStoreClient, args: argparse.Namespace, out: Output, planner: SwitchPlanner) -> int:
    """Plans (and with ``--execute`` switches) every selected group; prints one row each and a total."""
    outcomes: list[GroupOutcome] = []
    try:
        with planner:
            for summary in _groups(client, args.prefix or ""):
                outcome = _switch_one(client, summary, args, planner)
                if outcome is not None:
                    outcomes.append(outcome)
    except Exception as error:  # B unreachable: nothing planned past this point
        out.error(f"Error: cannot plan the switch: {error}")
        if not outcomes:
            return EXIT_ERROR
    refused = sum(o.status == "refused" for o in outcomes)
    if out.json:
        out.document(
            {
                "to_cluster_id": planner.to_cluster_id,
                "dry_run": not args.execute,
                "groups": [_outcome_json(o) for o in outcomes],
            }
        )
    else:
        what = "Switched" if args.execute else "Would switch (dry run; --execute applies)"
        out.line(f"{what} to cluster {planner.to_cluster_id}:")
        out.table(
            ("GROUP", "FROM-CLUSTER", "PARTITIONS", "METHODS", "RE-READS", "MISSING", "RESULT"),
            (
                (
                    o.group_id,
                    o.from_cluster_id or "(none)",
                    len(o.plan.partitions) if o.plan else "-",
                    o.plan.source.removeprefix("methods ") if o.plan else "-",
                    _total(o.plan, "rereads"),
                    _total(o.plan, "missing"),
                    o.status + (f" (generation {o.generation})" if o.generation else "") + _reason(o),
                )
                for o in outcomes
            ),
        )
        counts = {s: sum(o.status == s for o in outcomes) for s in ("would switch", "switched", "on target already")}
        out.line(
            f"{len(outcomes)} groups: "
            + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
            + (", " if any(counts.values()) and refused else "")
            + (f"{refused} refused" if refused else "")
        )
    return EXIT_ERROR if refused else EXIT_OK


def _reason(o: GroupOutcome) -> str:
    return f": {o.reason}" if o.reason else ""


def _total(plan: SwitchPlan | None, what: str) -> str:
    """The sum over the plan's partitions; "?" added where some partition's count is not known."""
    if plan is None:
        return "-"
    values = [getattr(p, what) for p in plan.partitions]
    known = sum(v for v in values if v is not None)
    if all(v is None for v in values):
        return "?"
    return f"{known}+?" if None in values else str(known)


def partition_json(p: PartitionSwitch) -> dict[str, Any]:
    """One partition of a switch plan in the CLI's JSON (one group's switch and all groups' alike)."""
    return {
        "topic": p.topic,
        "partition": p.partition,
        "source_offset": p.source_offset,
        "target_topic": p.target_topic,
        "target_offset": p.target_offset,
        "method": p.method,
        "rereads_at_most": p.rereads,
        "missing": p.missing,
        "missing_basis": p.missing_basis,
        "known_log_end": p.known_log_end,
        "note": p.note,
    }


def _outcome_json(o: GroupOutcome) -> dict[str, Any]:
    return {
        "group_id": o.group_id,
        "from_cluster_id": o.from_cluster_id,
        "status": o.status,
        "reason": o.reason,
        "generation": o.generation or None,
        "methods": o.plan.source if o.plan else None,
        "partitions": [partition_json(p) for p in (o.plan.partitions if o.plan else [])],
    }
