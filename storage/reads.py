"""Reads: a group's offsets, the groups, a group's topics and the offset history, page by page.

A group's description with lag is :mod:`.describe`; the lag and status columns these reads
select live in :mod:`.lag_columns`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    ColumnElement,
    CompoundSelect,
    Connection,
    Integer,
    Select,
    Text,
    and_,
    any_,
    bindparam,
    case,
    func,
    literal_column,
    select,
    true,
    union_all,
)
from sqlalchemy.dialects.postgresql import psycopg as postgresql_psycopg

from offsetstore.core.types import (
    NO_OFFSET,
    ChangeKind,
    CommittedOffset,
    FetchResult,
    GroupSummary,
    OffsetChange,
    Page,
    TopicPartition,
    TopicSummary,
)
from offsetstore.storage import validate as check
from offsetstore.storage._groups import SelectionArg, or_no_offset, where_selected
from offsetstore.storage.batched_pages import batched, per_group
from offsetstore.storage.lag_columns import (
    lag_columns,
    with_watermarks,
)
from offsetstore.storage.pages import (
    FETCH_ENTRY_BYTES,
    PageRequest,
    check_same_generation,
    cut_page,
    keyset_page,
    next_token,
    page_start,
    sized_page,
    sized_page_params,
)
from offsetstore.storage.schema import groups, observed_groups, offset_history, offsets
from offsetstore.storage.steps import HotSteps, drive_steps

# A page of offsets is one statement of the hot path, driven on psycopg alone with no
# SQLAlchemy compile at each call: the query is built once, by the page builder that
# describe_group uses too, and compiled here to psycopg's own SQL.
_DIALECT = postgresql_psycopg.dialect()  # type: ignore[no-untyped-call]  # SQLAlchemy leaves it unannotated
_GROUP = bindparam("group", type_=Text)
_GENERATION = func.coalesce(
    select(groups.c.generation).where(groups.c.group_id == _GROUP, groups.c.deleted_at.is_(None)).scalar_subquery(),
    literal_column("0"),
)


def _fetch_size(topic: ColumnElement[str], metadata_bytes: ColumnElement[Any]) -> ColumnElement[int]:
    return func.octet_length(topic) + metadata_bytes + literal_column(str(FETCH_ENTRY_BYTES))


def _compiled(rows: Select[Any] | CompoundSelect[Any]) -> str:
    return str(sized_page(rows.subquery("unsized"), _GENERATION).compile(dialect=_DIALECT))


_STORED = select(
    offsets.c.topic,
    offsets.c.partition,
    offsets.c.offset,
    offsets.c.metadata,
    offsets.c.commit_time,
    _fetch_size(offsets.c.topic, func.octet_length(offsets.c.metadata)).label("size"),
).where(offsets.c.group_id == _GROUP)
FETCH_PAGE = _compiled(_STORED)
# Named partitions without an offset come back as -1 (Kafka's convention), in their place
# in key order, so that they are paged like the others.
_named = (
    func.unnest(bindparam("topics", type_=ARRAY(Text)), bindparam("partitions", type_=ARRAY(Integer)))
    .table_valued("topic", "partition")
    .render_derived(name="n")
)
_FETCH_SELECTED = _compiled(
    union_all(
        _STORED.where(offsets.c.topic == any_(bindparam("whole", type_=ARRAY(Text)))),
        select(
            _named.c.topic,
            _named.c.partition,
            func.coalesce(offsets.c.offset, literal_column(str(NO_OFFSET))),
            func.coalesce(offsets.c.metadata, literal_column("''")),
            offsets.c.commit_time,
            _fetch_size(_named.c.topic, func.coalesce(func.octet_length(offsets.c.metadata), literal_column("0"))),
        ).select_from(
            _named.outerjoin(
                offsets,
                and_(
                    offsets.c.group_id == _GROUP,
                    offsets.c.topic == _named.c.topic,
                    offsets.c.partition == _named.c.partition,
                ),
            )
        ),
    )
)
#: The generation alone, for a page without rows.
FETCH_GENERATION = str(select(_GENERATION).compile(dialect=_DIALECT))
#: :data:`FETCH_PAGE` for each group of a batch, in one statement (:mod:`.batched_pages`): what the
#: runtime's coalesced reads send. A row: the caller's index (from 1), the generation where the
#: group's page has no rows, the page's row.
BATCHED_FETCH = batched(FETCH_PAGE, "f", "CASE WHEN f.topic IS NULL THEN (" + per_group(FETCH_GENERATION) + ") END, ")


def fetch_offsets(
    conn: Connection, group_id: str, topics: SelectionArg = None, page: PageRequest = PageRequest()
) -> FetchResult:
    """Committed offsets, one page of them; a named partition without one comes back with offset -1.

    One statement, so the page's offsets and the generation come from one snapshot.
    """
    return drive_steps(conn, fetch_offsets_steps(group_id, topics, page))


def fetch_offsets_steps(
    group_id: str, topics: SelectionArg = None, page: PageRequest = PageRequest()
) -> HotSteps[FetchResult]:
    """:func:`fetch_offsets` as steps (see :func:`write_batch_steps`); bad input raises before the first."""
    v = check.Violations()
    check.group_id(group_id, violations=v)
    sels = check.selections(topics, violations=v)
    limit = page.checked(v)
    v.raise_if_any()
    request = ("fetch", group_id, sels)
    seen, after_topic, after_partition = page_start(page, request)
    params = {"group": group_id, **sized_page_params(page, limit, after_topic, after_partition)}
    if sels:
        pairs = [(t, p) for t, parts in sels for p in parts]
        params.update(
            whole=[t for t, parts in sels if not parts],
            topics=[t for t, _ in pairs],
            partitions=[p for _, p in pairs],
        )
        rows = (yield _FETCH_SELECTED, params) or []
    else:
        rows = (yield FETCH_PAGE, params) or []
    # Each row carries the generation, read in the same statement; a page without rows asks for it.
    generation: int = rows[0][0] if rows else ((yield FETCH_GENERATION, {"group": group_id}) or [(0,)])[0][0]
    check_same_generation(group_id, seen, generation)
    listed, more = cut_page(rows, limit, page, f"the offsets of group {group_id!r}")
    offsets = {
        TopicPartition(topic, partition): CommittedOffset(topic, partition, offset, metadata, at)
        for _, topic, partition, offset, metadata, at, _, _ in listed
    }
    token = next_token(request, generation, listed[-1][1], listed[-1][2], page.key) if more else ""
    return FetchResult(offsets=dict(sorted(offsets.items())), generation=generation, next_page_token=token)


def list_groups(conn: Connection, prefix: str = "", *, page_size: int = 0, page_token: str = "") -> Page[GroupSummary]:
    """Groups ordered by id, one page at a time."""
    v = check.Violations()
    check.prefix(prefix, violations=v)
    size = check.page_size(page_size, violations=v)
    v.raise_if_any()
    _, lag = lag_columns()
    per_group = (
        select(
            func.count().label("partition_count"),
            func.max(offsets.c.commit_time).label("last_commit_time"),
            # -1 unless every partition's lag is known: a partial sum would understate it.
            # The sum saturates at int64's maximum: two partitions whose log end is near it
            # (watermarks are any tenant's to report) must not overflow everyone's page.
            case(
                (func.count() == 0, NO_OFFSET),
                (func.bool_and(lag >= 0), func.least(func.sum(lag), check.INT64_MAX)),
                else_=NO_OFFSET,
            ).label("total_lag"),
        )
        .select_from(with_watermarks())
        .where(offsets.c.group_id == groups.c.group_id)
        .lateral("per_group")
    )
    query = (
        select(
            groups.c.group_id,
            groups.c.generation,
            per_group.c.partition_count,
            per_group.c.last_commit_time,
            per_group.c.total_lag,
            observed_groups.c.source.label("observed_source"),
        )
        .select_from(
            groups.join(per_group, true()).outerjoin(observed_groups, observed_groups.c.group_id == groups.c.group_id)
        )
        .where(groups.c.deleted_at.is_(None))
    )
    if prefix:
        query = query.where(func.starts_with(groups.c.group_id, prefix))
    rows, token = keyset_page(conn, query, groups.c.group_id, size, page_token)
    items = [
        GroupSummary(
            r.group_id,
            r.generation,
            r.partition_count,
            r.last_commit_time,
            int(r.total_lag),
            r.observed_source is not None,
            r.observed_source or "",
        )
        for r in rows
    ]
    return Page(items, token)


def list_topics(conn: Connection, group_id: str, *, page_size: int = 0, page_token: str = "") -> Page[TopicSummary]:
    """The topics ``group_id`` has offsets for, ordered by topic, one page at a time; none for an unknown group."""
    v = check.Violations()
    check.group_id(group_id, violations=v)
    size = check.page_size(page_size, violations=v)
    v.raise_if_any()
    _, lag = lag_columns()
    query = (
        select(
            offsets.c.topic,
            func.count().label("partition_count"),
            func.max(offsets.c.commit_time).label("last_commit_time"),
            # As list_groups: -1 unless every partition's lag is known, saturated at int64's maximum.
            case(
                (func.bool_and(lag >= 0), func.least(func.sum(lag), check.INT64_MAX)),
                else_=NO_OFFSET,
            ).label("total_lag"),
        )
        .select_from(with_watermarks())
        .where(offsets.c.group_id == group_id)
        .group_by(offsets.c.topic)
    )
    rows, token = keyset_page(conn, query, offsets.c.topic, size, page_token)
    items = [TopicSummary(r.topic, r.partition_count, r.last_commit_time, int(r.total_lag)) for r in rows]
    return Page(items, token)


def list_offset_history(
    conn: Connection,
    group_id: str,
    topics: SelectionArg = None,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    page_size: int = 0,
    page_token: str = "",
) -> Page[OffsetChange]:
    """The group's commits, resets and deletes, newest first; ``since`` inclusive, ``until`` exclusive."""
    v = check.Violations()
    check.group_id(group_id, violations=v)
    sels = check.selections(topics, violations=v)
    size = check.page_size(page_size, violations=v)
    v.raise_if_any()
    h = offset_history
    query = select(
        h.c.id,
        h.c.topic,
        h.c.partition,
        h.c.previous_offset,
        h.c.new_offset,
        h.c.kind,
        h.c.generation,
        h.c.change_time,
        h.c.actor,
        h.c.source,
    ).where(h.c.group_id == group_id, where_selected(h, sels))
    if since is not None:
        query = query.where(h.c.change_time >= since)
    if until is not None:
        query = query.where(h.c.change_time < until)
    rows, token = keyset_page(conn, query, h.c.id, size, page_token, newest_first=True)
    items = [
        OffsetChange(
            r.topic,
            r.partition,
            or_no_offset(r.previous_offset),
            or_no_offset(r.new_offset),
            ChangeKind(r.kind),
            r.generation,
            r.change_time,
            r.actor,
            r.source,
        )
        for r in rows
    ]
    return Page(items, token)
