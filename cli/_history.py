"""``groups history``: a group's commits, resets, deletes and expiries, newest first."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from offsetstore.cli._errors import EXIT_ERROR, EXIT_OK
from offsetstore.cli._group_state import topic_selection
from offsetstore.cli._render import Output, change_json, kind_name, offset_cell, table_time
from offsetstore.client import OffsetStoreClient
from offsetstore.core.errors import GroupNotFoundError
from offsetstore.core.types import ChangeKind, OffsetChange

# The server caps a page at its own maximum; asking for more only saves round trips.
_HISTORY_PAGE = 1000


def cmd_history(client: OffsetStoreClient, args: argparse.Namespace, out: Output) -> int:
    changes: list[OffsetChange] = []
    token = ""
    while True:
        wanted = _HISTORY_PAGE if args.limit == 0 else min(_HISTORY_PAGE, args.limit - len(changes))
        page = client.list_offset_history(
            args.group,
            topics=topic_selection(args),
            since=args.since,
            until=args.until,
            page_size=wanted,
            page_token=token,
        )
        changes.extend(page.items)
        token = page.next_page_token
        if not token or (args.limit and len(changes) >= args.limit):
            break
    if args.limit:
        del changes[args.limit :]
    if not changes and args.since is None and args.until is None and args.topics is None:
        if client.fetch_offsets(args.group).generation == 0 and not _known_group(client, args.group):
            out.error(f"Error: group {args.group} does not exist (no offsets and no history).")
            return EXIT_ERROR
    stored = _history_stored(changes)
    if out.json:
        out.document(
            {
                "group_id": args.group,
                "changes": [
                    change_json(c, previous_stored=p, new_stored=n) for c, (p, n) in zip(changes, stored, strict=True)
                ],
            }
        )
        return EXIT_OK
    # SOURCE only where an adoption is listed: the usual table stays as wide as it was.
    sources = any(c.source for c in changes)
    out.table(
        ("TIME", "KIND", "TOPIC", "PARTITION", "PREVIOUS", "NEW", "GENERATION", "ACTOR", *(("SOURCE",) * sources)),
        (
            (
                table_time(c.change_time),
                kind_name(c.kind),
                c.topic,
                c.partition,
                offset_cell(c.previous_offset, stored=p),
                offset_cell(c.new_offset, stored=n),
                c.generation,
                c.actor or "-",
                *((c.source or "-",) * sources),
            )
            for c, (p, n) in zip(changes, stored, strict=True)
        ),
    )
    return EXIT_OK


def _history_stored(changes: Sequence[OffsetChange]) -> list[tuple[bool, bool]]:
    """For each change (newest first), whether its previous and its new offset were stored ones.

    The contract writes -1 for "none" in a change, which the latest placeholder also is. A
    commit, and a reset (which never deletes), store their new offset; a delete or expiry
    does not. A previous offset was stored if the partition's change just before it stored one,
    which only the listed changes can tell: beyond them, -1 is shown as none.
    """
    stores = (ChangeKind.COMMIT, ChangeKind.RESET, ChangeKind.ADOPT, ChangeKind.OBSERVED)
    last_stored: dict[tuple[str, int], bool] = {}
    result: list[tuple[bool, bool]] = []
    for change in reversed(changes):
        key = (change.topic, change.partition)
        new_stored = change.kind in stores
        result.append((last_stored.get(key, False), new_stored))
        last_stored[key] = new_stored
    result.reverse()
    return result


def _known_group(client: OffsetStoreClient, group: str) -> bool:
    """Whether the group id was ever used: a deleted group is NOT_FOUND with its generation kept."""
    try:
        client.describe_group(group)
    except GroupNotFoundError as error:
        return "generation" in error.metadata
    return True
