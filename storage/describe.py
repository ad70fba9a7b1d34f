"""DescribeGroup: one page of a group's partitions with log end, lag and status verdict, and the group's verdict.

The page is one statement (:func:`_describe_statement`, built once per status window and
lag-history flag: building it is most of a call's cost); its columns are
:mod:`.lag_columns`'s, the verdicts :mod:`.status`'s.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Connection, Select, Text, bindparam, func, select, true

from offsetstore.core.errors import GroupNotFoundError
from offsetstore.core.types import NO_OFFSET, GroupDescription, GroupStatus, PartitionStatus
from offsetstore.storage import validate as check
from offsetstore.storage.lag import lag_seconds_status
from offsetstore.storage.lag_columns import (
    facts_of,
    group_facts,
    group_verdict,
    lag_columns,
    lag_histories,
    lag_seconds_column,
    past_log_end_column,
    status_columns,
    with_watermarks,
)
from offsetstore.storage.pages import (
    DESCRIBE_ENTRY_BYTES,
    LAG_HISTORY_BYTES,
    PageRequest,
    check_same_generation,
    cut_page,
    next_token,
    page_start,
    sized_page,
    sized_page_params,
)
from offsetstore.storage.schema import groups, offsets, watermarks
from offsetstore.storage.status import DEFAULT_RULES, StatusRules, Verdict, judge

_GROUP = bindparam("group", type_=Text)


@functools.lru_cache(maxsize=16)
def _describe_statement(window: float, lag_history: bool) -> Select[Any]:
    """DescribeGroup's page query, built once per status window and lag-history flag (building it is most of a call).

    Its parameters: ``group`` and the page's (:func:`~.pages.sized_page_params`).
    """
    group = (
        select(
            groups.c.generation,
            groups.c.reset_count,
            groups.c.deleted_at,
            groups.c.member_id,
            groups.c.member_host,
            groups.c.active_at,
        )
        .where(groups.c.group_id == _GROUP)
        .subquery("g")
    )
    log_end, lag = lag_columns()
    rows = (
        select(
            offsets.c.topic,
            offsets.c.partition,
            offsets.c.offset,
            offsets.c.metadata,
            offsets.c.commit_time,
            log_end.label("log_end_offset"),
            lag.label("lag"),
            past_log_end_column().label("past_log_end"),
            lag_seconds_column().label("lag_seconds"),
            func.coalesce(watermarks.c.log_start_offset, NO_OFFSET).label("log_start_offset"),
            *status_columns(window),
            (
                func.octet_length(offsets.c.topic)
                + func.octet_length(offsets.c.metadata)
                + DESCRIBE_ENTRY_BYTES
                + (LAG_HISTORY_BYTES if lag_history else 0)
            ).label("size"),
        )
        .select_from(with_watermarks())
        .where(offsets.c.group_id == _GROUP)
        .subquery("unsized")
    )
    part = sized_page(rows).lateral("part")
    return select(group, part).select_from(group.outerjoin(part, true())).order_by(part.c.topic, part.c.partition)


def describe_group(
    conn: Connection,
    group_id: str,
    page: PageRequest = PageRequest(),
    rules: StatusRules = DEFAULT_RULES,
    lag_history: bool = False,
) -> GroupDescription:
    """One page of the group's partitions with log end, lag and verdict; :class:`GroupNotFoundError` if unknown or deleted.

    One statement, so the partitions and the generation come from one snapshot. A
    deleted group's error carries the generation and reset count its id keeps. The group's
    verdict is over all its partitions: a second statement on a first page that has more after it.
    """
    v = check.Violations()
    check.group_id(group_id, violations=v)
    limit = page.checked(v)
    v.raise_if_any()
    request = ("describe", group_id)
    seen, after_topic, after_partition = page_start(page, request)
    found = conn.execute(
        _describe_statement(rules.window, lag_history),
        {"group": group_id, **sized_page_params(page, limit, after_topic, after_partition)},
    ).all()
    if not found or found[0].deleted_at is not None:
        metadata = {"group_id": group_id}
        if found:
            metadata.update(generation=str(found[0].generation), reset_count=str(found[0].reset_count), deleted="true")
        raise GroupNotFoundError(f"group {group_id!r} does not exist", metadata=metadata)
    first = found[0]
    check_same_generation(group_id, seen, first.generation)
    listed, more = cut_page(
        [r for r in found if r.topic is not None], limit, page, f"the description of group {group_id!r}"
    )
    histories = lag_histories(conn, group_id, [(r.topic, r.partition) for r in listed]) if lag_history else {}
    partitions = []
    for r in listed:
        lag_seconds, known = lag_seconds_status(r.lag_seconds)
        verdict = judge(facts_of(r, lag_seconds), rules)
        partitions.append(
            PartitionStatus(
                r.topic,
                r.partition,
                r.offset,
                r.metadata,
                r.commit_time,
                r.log_end_offset,
                r.lag,
                r.past_log_end,
                r.log_start_offset,
                lag_seconds,
                known,
                verdict.status,
                verdict.reason,
                r.watermark_time,
                tuple(histories.get((r.topic, r.partition), ())),
            )
        )
    token = next_token(request, first.generation, listed[-1].topic, listed[-1].partition, page.key) if more else ""
    if not more and not page.page_token:
        verdict = group_verdict([(p.topic, p.partition, Verdict(p.status, p.status_reason)) for p in partitions])
    elif not page.page_token:
        verdict = group_facts(conn, group_id, rules)
    else:
        verdict = Verdict(GroupStatus.UNSPECIFIED, "")  # the first page has it
    return GroupDescription(
        group_id,
        first.generation,
        partitions,
        first.reset_count,
        first.member_id,
        first.member_host,
        token,
        first.active_at,
        verdict.status,
        verdict.reason,
    )
