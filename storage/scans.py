"""How many partitions a read that aggregates will scan: the weight the server admits it at (issue 47).

A DescribeGroup's first page judges every partition of the group for the group's verdict,
a ListTopics page sums every partition of its topics, and a ListGroups page every
partition of its groups, whatever the page size. The server weighs these reads by what
these statements count, before it admits them. Each count stops at ``cap`` rows (the
admission's share: a read that costs more runs alone anyway), so weighing a read costs at
most ``cap`` index entries, never the scan it weighs.
"""

from __future__ import annotations

from sqlalchemy import Connection, func, select, true

from offsetstore.core.errors import InvalidArgumentError
from offsetstore.storage import validate as check
from offsetstore.storage.kept_verdicts import MAX_AGE, serves
from offsetstore.storage.pages import decode_token, token_key
from offsetstore.storage.schema import groups, offsets

__all__ = ["group_partitions", "listed_partitions", "verdict_partitions"]


def group_partitions(conn: Connection, group_id: str, cap: int) -> int:
    """The partitions ``group_id`` has offsets for, counted up to ``cap`` (the primary key's range).

    0 for a group id that is not one: the read refuses it, naming every bad field of its request.
    """
    try:
        check.group_id(group_id)
    except InvalidArgumentError:
        return 0
    some = select(offsets.c.partition).where(offsets.c.group_id == group_id).limit(cap).subquery()
    return int(conn.execute(select(func.count()).select_from(some)).scalar_one())


#: Seconds: the age a kept verdict may have for a first page to be weighed as a page. Half of
#: what :mod:`.describe` accepts, so the verdict is still kept when the admitted call reads it
#: (a call would have to wait this long between its weighing and its read, far past any deadline).
WEIGHED_MAX_AGE = MAX_AGE / 2


def verdict_partitions(conn: Connection, group_id: str, page_size: int, window: float, cap: int) -> int:
    """The partitions a DescribeGroup first page of ``page_size`` judges beyond its page, counted up to ``cap``.

    None (0) when a verdict kept for the group under ``window`` (:mod:`.kept_verdicts`) serves
    it: one probe of two primary keys, and the group is not counted. Otherwise, and for
    ``page_size`` 0 (the whole group at once), every partition of the group
    (:func:`group_partitions`): a first page without a kept verdict judges them all.
    """
    if page_size > 0:
        try:
            check.group_id(group_id)
        except InvalidArgumentError:
            return 0
        if serves(conn, group_id, window, WEIGHED_MAX_AGE):
            return 0
    return group_partitions(conn, group_id, cap)


def listed_partitions(conn: Connection, prefix: str, page_size: int, page_token: str, cap: int) -> int:
    """The partitions of the groups a ListGroups page (``prefix``, ``page_size``, ``page_token``) sums, up to ``cap``.

    The page's groups are those :func:`~.reads.list_groups` walks: live, under ``prefix``, in
    id order after the token's, one more than the page. 0 for a request the listing refuses
    (it names every bad field).
    """
    v = check.Violations()
    check.prefix(prefix, violations=v)
    size = check.page_size(page_size, violations=v)
    if v.found:
        return 0
    page = select(groups.c.group_id).where(groups.c.deleted_at.is_(None))
    if prefix:
        page = page.where(func.starts_with(groups.c.group_id, prefix))
    if page_token:
        try:
            last = decode_token(page_token, str, token_key(conn))
        except InvalidArgumentError:
            return 0
        page = page.where(groups.c.group_id > last)
    walked = page.order_by(groups.c.group_id).limit(size + 1).subquery()
    # Each group's rows from its primary key's range, at most ``cap``: a LATERAL with a LIMIT is
    # never made a join the planner may choose to hash, which (a page of small groups, a store of
    # 1M offsets) read every group's offsets to weigh 30 groups of 16.
    each = (
        select(offsets.c.partition)
        .where(offsets.c.group_id == walked.c.group_id)
        .correlate(walked)
        .limit(cap)
        .lateral("each")
    )
    some = select(each.c.partition).select_from(walked.join(each, true())).limit(cap).subquery()
    return int(conn.execute(select(func.count()).select_from(some)).scalar_one())
