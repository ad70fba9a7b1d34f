"""DescribeGroup: one page of a group's partitions with log end, lag and status verdict, and the group's verdict.

The page is one statement (:func:`_describe_statement`, built once per status window and
lag-history flag: building it is most of a call's cost); its columns are
:mod:`.lag_columns`'s, the verdicts :mod:`.status`'s.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import ARRAY, Connection, Integer, Select, Text, and_, bindparam, extract, func, select, true

from offsetstore.core.errors import GroupNotFoundError
from offsetstore.core.types import NO_OFFSET, GroupDescription, GroupStatus, PartitionStatus, RecordFingerprint
from offsetstore.storage import validate as check
from offsetstore.storage.batched_pages import PER_GROUP, batched
from offsetstore.storage.kept_verdicts import MAX_AGE, evaluate_steps, verdict_of
from offsetstore.storage.lag import lag_seconds_status
from offsetstore.storage.lag_columns import (
    WATERMARK,
    facts_of,
    group_verdict,
    lag_columns,
    lag_histories_of,
    lag_histories_query,
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
from offsetstore.storage.schema import (
    group_clusters,
    group_verdicts,
    groups,
    observed_groups,
    offsets,
    record_fingerprints,
)
from offsetstore.storage.status import DEFAULT_RULES, StatusRules, Verdict, judge
from offsetstore.storage.steps import CompiledQuery, HotSteps, compile_query, drive_steps

_GROUP = bindparam("group", type_=Text)


@functools.lru_cache(maxsize=16)
def _describe_statement(window: float, lag_history: bool) -> Select[Any]:
    """DescribeGroup's page query, built once per status window and lag-history flag (building it is most of a call).

    Its parameters: ``group`` and the page's (:func:`~.pages.sized_page_params`). The group's
    row comes with its kept verdict (:mod:`.kept_verdicts`) under ``window``, if one was kept
    since its latest reset or delete: one more probe of a primary key.
    """
    kept = group_verdicts.c
    group = (
        select(
            groups.c.generation,
            groups.c.reset_count,
            groups.c.deleted_at,
            groups.c.member_id,
            groups.c.member_host,
            groups.c.active_at,
            kept.status.label("kept_status"),
            kept.reason.label("kept_reason"),
            kept.partitions.label("kept_partitions"),
            extract("epoch", func.statement_timestamp() - kept.evaluated_at).label("kept_age"),
            observed_groups.c.source.label("observed_source"),
            observed_groups.c.lost_partitions.label("observed_lost_partitions"),
            observed_groups.c.lost_since.label("observed_lost_time"),
            # One index probe of a small table (migration 0016): the group's bound cluster, NULL for none.
            select(group_clusters.c.kafka_cluster_id)
            .where(group_clusters.c.group_id == _GROUP)
            .scalar_subquery()
            .label("kafka_cluster_id"),
        )
        .select_from(
            groups.outerjoin(
                group_verdicts,
                and_(
                    kept.group_id == groups.c.group_id,
                    kept.status_window == window,
                    kept.reset_count == groups.c.reset_count,
                ),
            ).outerjoin(observed_groups, observed_groups.c.group_id == groups.c.group_id)
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
            func.coalesce(WATERMARK.c.log_start_offset, NO_OFFSET).label("log_start_offset"),
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


@functools.lru_cache(maxsize=16)
def _page_query(window: float, lag_history: bool) -> CompiledQuery:
    return compile_query(_describe_statement(window, lag_history))


_HISTORIES = compile_query(lag_histories_query())


def _fingerprints_query() -> Select[Any]:
    """The record fingerprints of ``group``'s partitions (``topics``, ``partitions``) still valid for their offsets."""
    f = record_fingerprints
    wanted = (
        func.unnest(bindparam("topics", type_=ARRAY(Text)), bindparam("partitions", type_=ARRAY(Integer)))
        .table_valued("topic", "partition")
        .render_derived(name="k")
    )
    return (
        select(f.c.topic, f.c.partition, f.c.offset, f.c.timestamp_ms, f.c.digest)
        .join(wanted, and_(wanted.c.topic == f.c.topic, wanted.c.partition == f.c.partition))
        .where(f.c.group_id == _GROUP)
    )


_FINGERPRINTS = compile_query(_fingerprints_query())


def _valid(found: RecordFingerprint | None, offset: int) -> RecordFingerprint | None:
    """The fingerprint if it is of the record before ``offset`` (a reset since leaves an older one behind)."""
    return found if found is not None and found.offset == offset else None


def page_statement(window: float, lag_history: bool) -> tuple[str, dict[str, Any]]:
    """The SQL of :func:`describe_group_steps`' first statement (the page) under ``window``, and its fixed parameters.

    The very string the steps yield (a runtime that coalesces pages knows it by identity).
    The caller's parameters are ``group`` and the page's (:func:`~.pages.sized_page_params`);
    the first column is the group's generation, NULL in no row of a group that exists.
    """
    query = _page_query(window, lag_history)
    return query.sql, query.fixed


def batched_page_statement(window: float, lag_history: bool) -> tuple[str, str, dict[str, Any]]:
    """:func:`page_statement` (its SQL), the same page for each group of a batch in one statement (:mod:`.batched_pages`), and the batch's fixed parameters."""
    first, compiled = page_statement(window, lag_history)
    fixed = {name: value for name, value in compiled.items() if name not in PER_GROUP}
    return first, batched(first, "d", fixed=fixed), fixed


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
    verdict is over all its partitions: on a first page that has more after it, the one kept
    for a large group (:mod:`.kept_verdicts`, its age in its reason), else more statements.
    """
    return drive_steps(conn, describe_group_steps(group_id, page, rules, lag_history))


def describe_group_steps(
    group_id: str,
    page: PageRequest = PageRequest(),
    rules: StatusRules = DEFAULT_RULES,
    lag_history: bool = False,
) -> HotSteps[GroupDescription]:
    """:func:`describe_group` as steps (see :func:`~.writes.write_batch_steps`); bad input raises before the first."""
    v = check.Violations()
    check.group_id(group_id, violations=v)
    limit = page.checked(v)
    v.raise_if_any()
    request = ("describe", group_id)
    seen, after_topic, after_partition = page_start(page, request)
    query = _page_query(rules.window, lag_history)
    params = sized_page_params(page, limit, after_topic, after_partition)
    found = query.rows((yield query.statement(group=group_id, **params)))
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
    histories = {}
    if lag_history and listed:
        keys = [(r.topic, r.partition) for r in listed]
        statement = _HISTORIES.statement(group=group_id, topics=[t for t, _ in keys], partitions=[p for _, p in keys])
        histories = lag_histories_of(_HISTORIES.rows((yield statement)))
    prints: dict[tuple[str, int], RecordFingerprint] = {}
    if first.kafka_cluster_id and listed:
        # Only a group bound to a cluster (a writer that fingerprints) pays this statement.
        keys = [(r.topic, r.partition) for r in listed]
        statement = _FINGERPRINTS.statement(
            group=group_id, topics=[t for t, _ in keys], partitions=[p for _, p in keys]
        )
        prints = {
            (r.topic, r.partition): RecordFingerprint(r.offset, r.timestamp_ms, bytes(r.digest))
            for r in _FINGERPRINTS.rows((yield statement))
        }
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
                _valid(prints.get((r.topic, r.partition)), r.offset),
            )
        )
    token = next_token(request, first.generation, listed[-1].topic, listed[-1].partition, page.key) if more else ""
    if not more and not page.page_token:
        verdict = group_verdict([(p.topic, p.partition, Verdict(p.status, p.status_reason)) for p in partitions])
    elif not page.page_token and first.kept_status is not None and first.kept_age <= MAX_AGE:
        verdict = verdict_of(first.kept_status, first.kept_reason, float(first.kept_age), first.kept_partitions)
    elif not page.page_token:
        verdict = (yield from evaluate_steps(group_id, rules)).verdict
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
        first.observed_source is not None,
        first.observed_source or "",
        first.observed_lost_partitions or 0,
        first.observed_lost_time,
        first.kafka_cluster_id or "",
    )
