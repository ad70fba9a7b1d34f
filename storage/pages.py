"""Pages of offsets and of lists: sizes, page requests and signed page tokens."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Integer,
    Row,
    Select,
    Subquery,
    Text,
    bindparam,
    func,
    select,
    tuple_,
)

from offsetstore.core.errors import (
    GroupChangedError,
    InvalidArgumentError,
    ResourceExhaustedError,
)
from offsetstore.storage import validate as check

#: A row of a page: SQLAlchemy's, or psycopg's tuple on the hot path.
RowT = TypeVar("RowT", bound=Sequence[Any])

# --- pages of offsets -------------------------------------------------------------
#
# A group's offsets are a few KB, or 44 MB: 10,000 partitions with 4 KB of metadata each.
# FetchOffsets and DescribeGroup answer at most ``max_bytes`` at once, measured in
# PostgreSQL before a row reaches Python: each row's size (its topic, its metadata, and an
# upper bound of the protobuf framing around them) is summed in key order, and a page ends
# where the sum passes ``max_bytes`` or its row count reaches ``page_size``. A request that
# asks for no pages (page_size 0) gets every offset at once, or, past ``max_bytes``,
# RESOURCE_EXHAUSTED telling it to page; it never gets a silently shortened answer.
# Each page is one statement (one snapshot). The token holds the generation the first page
# saw; a later page that sees another one (a join or a reset came between) fails with
# GroupChangedError, so pages never mix offsets from before and after a reset.

#: Protobuf bytes around one entry's topic and metadata, at most: field tags and lengths,
#: partition and offset varints, the commit time, the entry's own tag and length.
FETCH_ENTRY_BYTES = 48
#: The same for DescribeGroup's PartitionStatus, which adds log start, log end, lag, the past-end flag,
#: lag in seconds with its status, the verdict with its one-line reason and the watermark time.
DESCRIBE_ENTRY_BYTES = 400
#: What a partition's lag history adds, at most: a point (a time and a double, framed) per sample of the ring.
LAG_HISTORY_BYTES = 90 * 24
#: A response's bytes outside its entries: generation, page token, group id, member id and host.
ENVELOPE_BYTES = 8192
#: page_size larger than this is cut to it: one request may name this many partitions.
MAX_OFFSETS_PAGE = check.MAX_PARTITIONS
#: Storage callers in-process (the Spark sink, the Kafka writer) read without a byte limit.
UNLIMITED = check.INT64_MAX


@dataclass(frozen=True)
class PageRequest:
    """Which page of a group's offsets to read, and how large it may be.

    ``page_size`` 0 asks for everything at once, refused beyond ``max_bytes``; above 0 it
    asks for pages of at most that many entries and ``max_bytes``.
    """

    page_size: int = 0
    page_token: str = ""
    max_bytes: int = UNLIMITED
    #: The store's page-token key (:func:`token_key`): tokens are signed and checked with it.
    key: bytes = b""

    def checked(self, v: check.Violations) -> int | None:
        """The row limit of the page (None: no limit); bad values are added to ``v``."""
        if self.page_size < 0:
            v.add("page_size", "must be >= 0")
        return min(self.page_size, MAX_OFFSETS_PAGE) if self.page_size > 0 else None


def fingerprint(request: tuple[object, ...]) -> str:
    """What a page token is bound to: the request it continues (not its page size)."""
    return hashlib.blake2b(json.dumps(request).encode(), digest_size=8).hexdigest()


def page_start(page: PageRequest, request: tuple[object, ...]) -> tuple[int | None, str, int]:
    """(generation seen by the first page or None, after topic, after partition) of ``page``'s token.

    ``request`` names what the token must have been issued for (the RPC, the group, its topics).
    """
    if not page.page_token:
        return None, "", -1
    value = _verified(page.page_token, page.key)
    if (
        isinstance(value, list)
        and len(value) == 4
        and value[0] == fingerprint(request)
        and all(type(n) is int and 0 <= n <= check.INT64_MAX for n in (value[1], value[3]))
        and isinstance(value[2], str)
        and check.valid_topic(value[2])
    ):
        return value[1], value[2], value[3]
    raise InvalidArgumentError.field("page_token", "is not a token this server issued for this request")


def cut_page(
    rows: Sequence[RowT], limit: int | None, page: PageRequest, what: str, upto: int = -1
) -> tuple[Sequence[RowT], bool]:
    """The rows of the page, and whether more follow; rows end with their running size (``upto``)."""
    if limit is not None and len(rows) > limit:
        return rows[:limit], True
    if rows and (rows[-1][upto] or 0) > page.max_bytes - ENVELOPE_BYTES:
        if limit is None:
            raise ResourceExhaustedError(
                f"{what} would take more than the {page.max_bytes} bytes one response may hold; "
                "ask for it in pages (page_size > 0; the Python client does)",
                metadata={"limit": "response_bytes", "max_bytes": str(page.max_bytes)},
            )
        return rows[:-1], True
    return rows, False


def sized_page(rows: Subquery, *leading: ColumnElement[Any]) -> Select[Any]:
    """The page of ``rows`` (a subquery with ``topic``, ``partition`` and ``size``) that a page request asks for.

    At most ``:rows`` rows after (``:after_topic``, ``:after_partition``), so that a page of
    a huge group reads no more than that; each with its running size in key order
    (``upto``, the last column); and of those, the rows that start within ``:budget``
    (the first one to pass it included: it shows that there is more). ``leading`` columns
    come first. The parameters are :func:`sized_page_params`'.
    """
    key = tuple_(rows.c.topic, rows.c.partition)
    after = tuple_(bindparam("after_topic", type_=Text), bindparam("after_partition", type_=Integer))
    first = (
        select(rows)
        .where(key > after)
        .order_by(rows.c.topic, rows.c.partition)
        .limit(bindparam("rows", type_=Integer))
        .subquery("r")
    )
    running = func.sum(first.c.size).over(order_by=(first.c.topic, first.c.partition), rows=(None, 0))
    sized = select(first, running.label("upto")).subquery("sized")
    return (
        select(*leading, sized)
        .where(sized.c.upto - sized.c.size <= bindparam("budget", type_=BigInteger))
        .order_by(sized.c.topic, sized.c.partition)
    )


def sized_page_params(page: PageRequest, limit: int | None, after_topic: str, after_partition: int) -> dict[str, Any]:
    """The parameters of :func:`sized_page` for ``page`` (``limit``: its row limit, None for none)."""
    return {
        "after_topic": after_topic,
        "after_partition": after_partition,
        "budget": page.max_bytes - ENVELOPE_BYTES,
        # One row past the limit shows that more follow; NULL is no limit.
        "rows": None if limit is None else limit + 1,
    }


def keyset_page(
    conn: Connection,
    query: Select[Any],
    key: ColumnElement[Any],
    size: int,
    page_token: str,
    *,
    newest_first: bool = False,
) -> tuple[Sequence[Row[Any]], str]:
    """The first ``size`` rows of ``query`` in ``key`` order after ``page_token``'s key, and the next page's token.

    For lists whose key is unique and never reused (group ids, history ids): the token
    holds the last key, so a page is one index range scan however deep it is.
    """
    signing = token_key(conn)
    query = query.order_by(key.desc() if newest_first else key).limit(size + 1)
    if page_token:
        last = decode_token(page_token, key.type.python_type, signing)
        query = query.where(key < last if newest_first else key > last)
    rows = conn.execute(query).all()
    token = encode_token(rows[size - 1]._mapping[key], signing) if len(rows) > size else ""
    return rows[:size], token


def next_token(request: tuple[object, ...], generation: int, topic: str, partition: int, key: bytes) -> str:
    return encode_token([fingerprint(request), generation, topic, partition], key)


def check_same_generation(group_id: str, seen: int | None, generation: int) -> None:
    if seen is not None and seen != generation:
        raise GroupChangedError(
            f"group {group_id!r} changed between two pages (generation {seen}, now {generation}: "
            "a join or a reset came between); read it again from the first page",
            metadata={"group_id": group_id, "generation": str(seen), "current_generation": str(generation)},
        )


# Page tokens are signed: base64url(JSON) "." base64url(HMAC-SHA256 of it, 16 bytes), under
# the store's key (migration 0006), so a token cannot be forged or altered; what a valid one
# holds is still checked, as any input is.
_TOKEN_KEY_SQL = "SELECT value FROM offsetstore.secrets WHERE name = 'page_token_key'"
_TOKEN_KEYS: dict[str, bytes] = {}


def token_key(conn: Connection) -> bytes:
    """The store's page-token key, read once per database by this process."""
    driver = conn.connection.driver_connection
    assert driver is not None
    info = driver.info  # libpq's own view: the engine's URL may list several hosts
    database = f"{info.host}:{info.port}/{info.dbname}"
    found = _TOKEN_KEYS.get(database)
    if found is None:
        found = _TOKEN_KEYS[database] = bytes(conn.exec_driver_sql(_TOKEN_KEY_SQL).scalar_one())
    return found


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _mac(payload: str, key: bytes) -> str:
    return _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest()[:16])


def encode_token(value: object, key: bytes) -> str:
    payload = _b64(json.dumps(value).encode())
    return f"{payload}.{_mac(payload, key)}"


def _verified(token: str, key: bytes) -> object:
    """What a token this store signed holds; None for anything else."""
    payload, dot, mac = token.rpartition(".")
    if not dot or not hmac.compare_digest(mac.encode(), _mac(payload, key).encode()):
        return None
    try:
        return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None


def decode_token(token: str, kind: type, key: bytes) -> object:
    value = _verified(token, key)
    valid = isinstance(value, kind) and not isinstance(value, bool)
    if isinstance(value, int):
        valid = valid and 0 < value <= check.INT64_MAX
    if isinstance(value, str):
        try:
            check.group_id(value)
        except InvalidArgumentError:
            valid = False
    if not valid:
        raise InvalidArgumentError.field("page_token", "is not a token this server issued")
    return value
