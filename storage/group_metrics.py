"""The per-group metrics' database reads: two statements per scrape, bounded whatever the store's size.

Storage-style operations (each takes a ``Connection``); :class:`~offsetstore.server.metrics.groups.GroupCollector`
runs them at scrape time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    CompoundSelect,
    Connection,
    Float,
    Select,
    Text,
    any_,
    bindparam,
    exists,
    extract,
    false,
    func,
    null,
    select,
    true,
    union_all,
)
from sqlalchemy.dialects.postgresql import ARRAY

from offsetstore import storage
from offsetstore.storage.kept_verdicts import MAX_AGE
from offsetstore.storage.lag_columns import with_watermarks
from offsetstore.storage.schema import group_verdicts, groups, observed_groups, offsets
from offsetstore.storage.status import DEFAULT_RULES, StatusRules

__all__ = ["GROUP_SERIES", "PARTITION_SERIES", "GroupScrape", "group_metrics", "group_sums", "share_series"]


def _build_group_query() -> Select[Any]:
    # The first of a scrape's two statements: which groups, how big each is, and the number
    # of all groups, left-joined so that it comes back even when the page is empty. Its cost
    # grows with the shown groups' partitions (a count and a max over each group's rows), never
    # with a join over them: that one runs in the second statement, on bounded rows.
    #
    # Which groups (issue 14): only groups with offsets (a JoinGroup costs nothing and shows
    # nothing), taken round-robin over tenants: every tenant's first group by id, then every
    # tenant's second, ... A tenant is the longest granted prefix the group id starts with
    # (`prefixes`, from the tokens file), else the id up to its first '-', '.' or '_'. So a
    # tenant that creates a thousand groups pushes out its own, never another tenant's.
    live = groups.c.deleted_at.is_(None)  # a deleted group's tombstone is no group
    has_offsets = exists().where(offsets.c.group_id == groups.c.group_id)
    granted = func.unnest(bindparam("prefixes", type_=ARRAY(Text))).table_valued("prefix").render_derived("granted")
    longest = (
        select(granted.c.prefix)
        .where(func.starts_with(groups.c.group_id, granted.c.prefix))
        .order_by(func.length(granted.c.prefix).desc())
        .limit(1)
        .scalar_subquery()
    )
    tenant = func.coalesce(longest, func.substring(groups.c.group_id, r"^[^-._]*"))
    ranked = (
        select(
            groups.c.group_id,
            tenant.label("tenant"),
            func.row_number().over(partition_by=tenant, order_by=groups.c.group_id).label("turn"),
        )
        .where(live, has_offsets)
        .subquery("ranked")
    )
    page = (
        select(ranked.c.group_id, ranked.c.tenant)
        .order_by(ranked.c.turn, ranked.c.tenant, ranked.c.group_id)
        .limit(bindparam("limit"))
        .subquery("page")
    )
    total = (
        select(
            func.count().label("groups"),
            func.count().filter(has_offsets).label("with_offsets"),
        )
        .select_from(groups)
        .where(live)
        .cte("total")
    )
    # Read from the primary key's range of the group (and its rows' commit times).
    size = (
        select(
            func.count().label("partitions"),
            extract("epoch", func.now() - func.max(offsets.c.commit_time)).label("age"),
        )
        .where(offsets.c.group_id == page.c.group_id)
        .lateral("size")
    )
    # An observed group's mark (offsetstore_group_observed, _observed_lost_partitions); NULL for the others.
    mark = (
        select(observed_groups.c.source, observed_groups.c.lost_partitions)
        .where(observed_groups.c.group_id == page.c.group_id)
        .lateral("mark")
    )
    shown = select(
        page.c.group_id,
        page.c.tenant,
        size.c.partitions,
        size.c.age,
        mark.c.source.label("observed_source"),
        mark.c.lost_partitions.label("observed_lost"),
    ).select_from(page.join(size, true()).outerjoin(mark, true()))
    shown_sq = shown.subquery("shown")
    s = shown_sq.c
    return select(
        total.c.groups,
        total.c.with_offsets,
        s.group_id,
        s.tenant,
        s.partitions,
        s.age,
        s.observed_source,
        s.observed_lost,
    ).select_from(total.outerjoin(shown_sq, true()))


def _kept_status() -> Any:
    # A summarized group's status: the verdict the maintenance kept for it (storage/kept_verdicts.py),
    # if one applies (the window, no reset since, not too old); one probe of a primary key a group.
    v = group_verdicts.c
    return (
        select(v.status)
        .select_from(group_verdicts.join(groups, groups.c.group_id == v.group_id))
        .where(
            v.group_id == offsets.c.group_id,
            v.status_window == bindparam("window", type_=Float),
            v.reset_count == groups.c.reset_count,
            v.evaluated_at >= func.statement_timestamp() - func.make_interval(0, 0, 0, 0, 0, 0, MAX_AGE),
        )
        .scalar_subquery()
    )


def _build_partition_query() -> CompoundSelect[Any]:
    # The second statement: the partitions of the groups that fit their share (at most the
    # series budget's rows), and one row of sums for each group that does not (with its kept
    # verdict's status, if any).
    _, lag = storage.lag_columns()
    past_end = storage.past_log_end_column()
    lag_seconds = storage.lag_seconds_column()
    joined = with_watermarks()
    ids = ARRAY(Text)
    detail = (
        select(
            offsets.c.group_id,
            offsets.c.topic,
            offsets.c.partition,
            offsets.c.offset,
            lag.label("lag"),
            past_end.label("past_end"),
            null().label("lag_sum"),
            null().label("past_ends"),
            lag_seconds.label("lag_seconds"),
            offsets.c.commit_time,
            *storage.status_columns(bindparam("window", type_=Float)),
            null().label("kept_status"),
        )
        .select_from(joined)
        .where(offsets.c.group_id == any_(bindparam("detailed", type_=ids)))
    )
    known = lag >= 0
    summary = (
        select(
            offsets.c.group_id,
            null(),
            null(),
            null(),
            func.coalesce(func.max(lag).filter(known), -1),
            false(),
            func.sum(lag).filter(known),
            func.count().filter(past_end),
            func.max(lag_seconds).filter(lag_seconds >= 0),
            *(null() for _ in range(len(storage.status_columns(0)) + 1)),  # no partition verdicts: see GroupCollector
            _kept_status(),
        )
        .select_from(joined)
        .where(offsets.c.group_id == any_(bindparam("summarized", type_=ids)))
        .group_by(offsets.c.group_id)
    )
    return union_all(detail, summary)


_GROUP_QUERY = _build_group_query()
_PARTITION_QUERY = _build_partition_query()

#: Series each shown group has at most whatever its size: partitions, lag sum, max lag, last
#: commit age, partitions past the log end, lag in seconds, status, and an observed group's mark and
#: lost partitions. Each of its partitions adds at most
#: two: its offset, and its lag or its past-log-end flag (a partition past the log end has no lag).
GROUP_SERIES = 9
PARTITION_SERIES = 2


@dataclass(frozen=True)
class GroupScrape:
    """What one scrape read: the group counts, the shown groups' sizes, and the partition rows."""

    groups: int
    with_offsets: int
    shown: list[Any]
    partitions: list[Any]
    detailed: frozenset[str]


def share_series(sizes: Sequence[tuple[str, str, int]], budget: int) -> frozenset[str]:
    """The groups whose partitions get series of their own, from (group, tenant, partitions) and a series budget.

    Fair across tenants (max-min): each tenant may use an equal share of the budget, a
    tenant that needs less leaves the rest to the others, and within its share a tenant's
    groups are taken smallest first. A group that does not fit its tenant's share gets no
    per-partition series (its sums stand for it), so a huge group never pushes out another
    tenant's, nor its own tenant's small ones. Budget a share leaves unused because the
    groups left are larger is offered again, in a few more rounds.
    """
    pending: dict[str, list[tuple[int, str]]] = {}
    for group, tenant, partitions in sizes:
        pending.setdefault(tenant, []).append((partitions * PARTITION_SERIES, group))
    for found in pending.values():
        found.sort()
    chosen: set[str] = set()
    for _ in range(8):
        if budget <= 0 or not pending:
            break
        # Water-filling: tenants in order of what they still need; each gets the smaller of
        # its need and an equal part of what is left.
        need = sorted(((sum(c for c, _ in found), tenant) for tenant, found in pending.items()))
        taken_any = False
        left = budget
        for i, (wanted, tenant) in enumerate(need):
            share = min(wanted, left // (len(need) - i))
            used = 0
            found = pending[tenant]
            while found and used + found[0][0] <= share:
                cost, group = found.pop(0)
                used += cost
                chosen.add(group)
            left -= used
            budget -= used
            taken_any = taken_any or used > 0
            if not found:
                del pending[tenant]
        if not taken_any:
            break
    return frozenset(chosen)


def group_metrics(
    conn: Connection,
    limit: int,
    prefixes: Sequence[str] = (),
    series_limit: int = 0,
    sums: bool = True,
    rules: StatusRules = DEFAULT_RULES,
) -> GroupScrape:
    """The rows of one scrape, in two statements whatever the store's size (a storage-style operation).

    ``limit`` caps the shown groups, ``series_limit`` (0: none) the per-group series; see
    :class:`GroupCollector`. Without ``sums``, the groups beyond their share get no row of
    sums (:func:`group_sums` reads them apart).
    """
    if series_limit > 0:
        limit = min(limit, series_limit // GROUP_SERIES)
    rows = conn.execute(_GROUP_QUERY, {"limit": limit, "prefixes": list(prefixes)}).all()
    shown = [r for r in rows if r.group_id is not None]
    head = rows[0] if rows else None
    if series_limit > 0:
        budget = series_limit - GROUP_SERIES * len(shown)
        detailed = share_series([(r.group_id, r.tenant, r.partitions) for r in shown], budget)
    else:
        detailed = frozenset(r.group_id for r in shown)
    summarized = [r.group_id for r in shown if r.group_id not in detailed]
    partitions: list[Any] = []
    if shown:
        summarized = summarized if sums else []
        partitions = list(
            conn.execute(
                _PARTITION_QUERY, {"detailed": sorted(detailed), "summarized": summarized, "window": rules.window}
            ).all()
        )
    return GroupScrape(
        groups=head.groups if head else 0,
        with_offsets=head.with_offsets if head else 0,
        shown=shown,
        partitions=partitions,
        detailed=detailed,
    )


def group_sums(conn: Connection, group_ids: Sequence[str], rules: StatusRules = DEFAULT_RULES) -> list[Any]:
    """One row of sums (lag sum, max lag, partitions past the log end, the kept status under ``rules``) for each of ``group_ids``."""
    params = {"detailed": [], "summarized": list(group_ids), "window": rules.window}
    return list(conn.execute(_PARTITION_QUERY, params).all())
