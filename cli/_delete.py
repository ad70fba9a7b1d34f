"""``groups delete``: a selection of a group's offsets removed, or the whole group."""

from __future__ import annotations

import argparse

from offsetstore.cli._errors import EXIT_OK
from offsetstore.cli._group_state import groups_of, several, stored_offsets, topic_selection
from offsetstore.cli._render import Output, offset_cell, offset_json
from offsetstore.client import OffsetStoreClient
from offsetstore.core.types import NO_OFFSET


def cmd_delete(client: OffsetStoreClient, args: argparse.Namespace, out: Output) -> int:
    documents = []
    groups = groups_of(client, args)
    if not args.all_groups:
        for group in groups:
            # Before any change, as reset does: a mistyped name is an error (GROUP_NOT_FOUND), not
            # "run again with --execute". A live group without offsets describes fine.
            if not client.fetch_offsets(group).offsets:
                client.describe_group(group)
    for n, group in enumerate(groups):
        if n and not out.json:
            out.line()
        documents.append(_delete_group(client, group, args, out))
    if out.json:
        out.document(documents if several(args) else documents[0])
    elif args.all_groups and not documents:
        out.line("There are no groups.")
    return EXIT_OK


def _delete_group(client: OffsetStoreClient, group: str, args: argparse.Namespace, out: Output) -> dict | None:
    selection = topic_selection(args)
    before = stored_offsets(client.fetch_offsets(group, selection))
    if args.execute:
        deleted = sorted(client.delete_offsets(group, topics=selection, all_topics=args.all_topics))
    else:
        deleted = sorted(before)
    # The offsets read just before; a commit racing the delete is not shown, but is deleted.
    rows = [(tp, before.get(tp, NO_OFFSET)) for tp in deleted]
    if out.json:
        return {
            "group_id": group,
            "dry_run": not args.execute,
            "deleted": [
                {"topic": tp.topic, "partition": tp.partition, **offset_json("offset", off, stored=tp in before)}
                for tp, off in rows
            ],
        }
    out.table(
        ("GROUP", "TOPIC", "PARTITION", "OFFSET"),
        ((group, tp.topic, tp.partition, offset_cell(off, stored=tp in before)) for tp, off in rows),
    )
    out.line()
    verb = "Deleted" if args.execute else "Would delete"
    if not deleted:
        out.line(f"Nothing to delete: group {group} has no offsets for that selection.")
    elif args.all_topics:
        out.line(f"{verb} group {group} and its {len(deleted)} offset(s).")
    else:
        out.line(f"{verb} {len(deleted)} offset(s) of group {group}.")
    if not args.execute:
        out.line("Dry run: nothing changed. Run again with --execute to delete.")
    return None
