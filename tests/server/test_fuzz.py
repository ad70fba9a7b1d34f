"""Every RPC fed random and malformed requests, and raw garbage: no INTERNAL, no crash, no leak, no write.

Property-based (hypothesis), derandomized so that CI runs the same examples every time.
Group ids and topics start with a namespace fresh for each example (but the empty ones), so
"nothing was written" can be checked exactly on the shared database; half the examples
first give the request's group and topics some offsets, history and watermarks to meet.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

import grpc
import pytest
import sqlalchemy as sa
from google.protobuf.timestamp_pb2 import Timestamp
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offsetstore.client import OffsetCommit, OffsetStoreClient, Watermark
from offsetstore.runtime.store import Store
from offsetstore.v1 import offset_store_pb2 as pb
from tests.fixtures.fix_server import ServerHandle

SERVICE = pb.DESCRIPTOR.services_by_name["OffsetStoreService"]
METHODS = sorted(m.name for m in SERVICE.methods)

# Outcomes a request may have; anything else (INTERNAL, UNKNOWN, UNAVAILABLE with the
# database up) means the server failed on input it should have judged.
EXPECTED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ABORTED,
}
# Text that would mean a database error, SQL or a stack trace reached the client
# (SQL keywords as SQL writes them: "selected twice" is no leak).
LEAKS = re.compile(
    r"psycopg|sqlalchemy|postgresql|traceback|File \"|(?-i:\b(?:SELECT|INSERT INTO|UPDATE|DELETE FROM|SQLSTATE)\b)",
    re.IGNORECASE,
)

FUZZ = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- strategies ------------------------------------------------------------------------

INT32 = st.one_of(st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31)]), st.integers(-(2**31), 2**31 - 1))
INT64 = st.one_of(st.sampled_from([0, 1, -1, -2, 2**31, 2**63 - 1, -(2**63)]), st.integers(-(2**63), 2**63 - 1))
# Valid values are drawn as often as the rest, so that requests also get past validation
# into the database (one_of picks its branches about evenly).
OFFSET = st.one_of(st.integers(0, 2**63 - 1), INT64)
PARTITION = st.one_of(st.integers(0, 3), INT32)  # small ones make duplicates likely
# Any Unicode but surrogates (which protobuf cannot carry), NUL and control characters included.
TEXT = st.one_of(
    st.text(max_size=20),
    st.text(st.characters(codec="utf-8"), min_size=250, max_size=400),
    st.sampled_from(["\x00", "'; DROP TABLE offsetstore.offsets; --", "%s", "\u00e9", "\U0001f600", " "]),
)
HUGE_TEXT = st.integers(4090, 5000).map(lambda n: "m" * n)
TIMESTAMP = st.one_of(
    st.builds(Timestamp, seconds=st.integers(0, 2**34), nanos=st.integers(0, 999_999_999)),
    st.builds(Timestamp, seconds=INT64, nanos=INT32),
)
VALID_NAME = st.from_regex(r"[A-Za-z0-9._-]{0,20}", fullmatch=True)


def group_ids(ns: str) -> st.SearchStrategy[str]:
    valid = VALID_NAME.map(lambda s: ns + s)
    return st.one_of(
        valid, valid, st.just(""), TEXT.map(lambda s: ns + s), st.integers(240, 300).map(lambda n: ns + "g" * n)
    )


def topics(ns: str) -> st.SearchStrategy[str]:
    valid = VALID_NAME.map(lambda s: ns + s)
    return st.one_of(
        valid, valid, valid, st.just(""), TEXT.map(lambda s: ns + s), st.integers(240, 260).map(lambda n: ns + "t" * n)
    )


@st.composite
def topic_pool(draw: st.DrawFn, ns: str) -> st.SearchStrategy[str]:
    """A few topics that a request's items pick from, so that the same topic comes back."""
    return st.sampled_from(draw(st.lists(topics(ns), min_size=1, max_size=3)))


@st.composite
def selections(draw: st.DrawFn, ns: str) -> list[pb.TopicSelection]:
    pool = draw(topic_pool(ns))
    selection = st.builds(pb.TopicSelection, topic=pool, partitions=st.lists(PARTITION, max_size=4))
    return draw(st.one_of(st.just([]), st.lists(selection, max_size=3)))


@st.composite
def commit_offsets(draw: st.DrawFn, ns: str) -> pb.CommitOffsetsRequest:
    pool = draw(topic_pool(ns))
    offsets = []
    for _ in range(draw(st.integers(0, 6))):
        commit = pb.OffsetCommit(
            topic=draw(pool),
            partition=draw(PARTITION),
            offset=draw(OFFSET),
            metadata=draw(st.one_of(st.just(""), TEXT, HUGE_TEXT)),
        )
        if draw(st.booleans()):
            commit.expected_offset = draw(st.one_of(st.just(-1), OFFSET))
        offsets.append(commit)
    return pb.CommitOffsetsRequest(
        group_id=draw(group_ids(ns)), offsets=offsets, generation=draw(st.one_of(st.just(0), INT64))
    )


@st.composite
def reset_offsets(draw: st.DrawFn, ns: str) -> pb.ResetOffsetsRequest:
    request = pb.ResetOffsetsRequest(
        group_id=draw(group_ids(ns)),
        topics=draw(selections(ns)),
        all_topics=draw(st.booleans()),
        dry_run=draw(st.booleans()),
    )
    if not request.topics and not request.all_topics and draw(st.booleans()):
        request.all_topics = True
    target = draw(st.sampled_from(["none", "to_offset", "shift_by", "to_boundary", "to_commit_time"]))
    if target == "to_offset":
        request.to_offset = draw(OFFSET)
    elif target == "shift_by":
        request.shift_by = draw(INT64)
    elif target == "to_boundary":
        request.to_boundary = draw(st.one_of(st.sampled_from([1, 2]), INT32))  # an open enum: any int32 arrives
    elif target == "to_commit_time":
        request.to_commit_time.CopyFrom(draw(TIMESTAMP))
    return request


@st.composite
def list_offset_history(draw: st.DrawFn, ns: str) -> pb.ListOffsetHistoryRequest:
    request = pb.ListOffsetHistoryRequest(
        group_id=draw(group_ids(ns)),
        topics=draw(selections(ns)),
        page_size=draw(st.one_of(st.integers(0, 2000), INT32)),
        page_token=draw(st.one_of(st.just(""), st.just(""), TEXT, st.binary(max_size=30).map(lambda b: b.hex()))),
    )
    for name in ("since", "until"):
        if draw(st.booleans()):
            getattr(request, name).CopyFrom(draw(TIMESTAMP))
    return request


@st.composite
def report_watermarks(draw: st.DrawFn, ns: str) -> pb.ReportWatermarksRequest:
    pool = draw(topic_pool(ns))
    marks = st.builds(pb.Watermark, topic=pool, partition=PARTITION, log_start_offset=OFFSET, log_end_offset=OFFSET)
    return pb.ReportWatermarksRequest(watermarks=draw(st.lists(marks, max_size=5)))


@st.composite
def expire_groups(draw: st.DrawFn, ns: str) -> pb.ExpireGroupsRequest:
    # Never the empty prefix: an executed expiry would reach every idle group of the shared database.
    request = pb.ExpireGroupsRequest(
        prefix=draw(group_ids(ns).filter(bool)),
        execute=draw(st.booleans()),
        limit=draw(st.one_of(st.integers(0, 1001), INT32)),
    )
    if draw(st.booleans()):
        request.idle_for.seconds = draw(st.one_of(st.integers(0, 10**10), INT64))
        request.idle_for.nanos = draw(st.one_of(st.just(0), INT32))
    return request


@st.composite
def observe_offsets(draw: st.DrawFn, ns: str) -> pb.ObserveOffsetsRequest:
    # A commit's positions (its compare-and-sets are refused here) and any source.
    commits = draw(commit_offsets(ns))
    return pb.ObserveOffsetsRequest(
        group_id=commits.group_id, offsets=commits.offsets, source=draw(st.one_of(st.just("kafka:c/g"), TEXT))
    )


REQUESTS: dict[str, Callable[[str], st.SearchStrategy[Any]]] = {
    "CommitOffsets": commit_offsets,
    "FetchOffsets": lambda ns: st.builds(pb.FetchOffsetsRequest, group_id=group_ids(ns), topics=selections(ns)),
    "ResetOffsets": reset_offsets,
    "DeleteOffsets": lambda ns: st.builds(
        pb.DeleteOffsetsRequest, group_id=group_ids(ns), topics=selections(ns), all_topics=st.booleans()
    ),
    "JoinGroup": lambda ns: st.builds(pb.JoinGroupRequest, group_id=group_ids(ns), member_id=TEXT),
    "ListGroups": lambda ns: st.builds(
        pb.ListGroupsRequest,
        # Never the empty prefix: listing every group of the shared database costs what that
        # database holds, not what the request says (test_service lists with no prefix).
        prefix=group_ids(ns).filter(bool),
        page_size=st.one_of(st.integers(0, 2000), INT32),
        page_token=st.one_of(st.just(""), TEXT, st.just("eyJ4IjoxfQ")),
    ),
    "DescribeGroup": lambda ns: st.builds(pb.DescribeGroupRequest, group_id=group_ids(ns)),
    "ListTopics": lambda ns: st.builds(
        pb.ListTopicsRequest,
        group_id=group_ids(ns),
        page_size=st.one_of(st.integers(0, 2000), INT32),
        page_token=st.one_of(st.just(""), TEXT, st.just("eyJ4IjoxfQ")),
    ),
    "ListOffsetHistory": list_offset_history,
    "ReportWatermarks": report_watermarks,
    "ExpireGroups": expire_groups,
    "ObserveOffsets": observe_offsets,
}


# --- checks -------------------------------------------------------------------------


def invoke(channel: grpc.Channel, method: str, payload: bytes) -> tuple[grpc.StatusCode, str]:
    """The status code of one call, and every text of its error (message and details)."""
    stub = channel.unary_unary(f"/{SERVICE.full_name}/{method}")
    try:
        stub(payload, timeout=30)
    except grpc.RpcError as error:
        texts = [error.details() or ""]  # type: ignore[attr-defined]
        status = rpc_status.from_call(error)  # type: ignore[arg-type]
        for detail in status.details if status is not None else ():
            for kind in (error_details_pb2.ErrorInfo, error_details_pb2.BadRequest):
                message = kind()
                if detail.Is(message.DESCRIPTOR):
                    detail.Unpack(message)
                    texts.append(str(message))
        return error.code(), "\n".join(texts)  # type: ignore[attr-defined]
    return grpc.StatusCode.OK, ""


def assert_no_leak(text: str) -> None:
    leaked = LEAKS.findall(text)
    assert not leaked, f"{leaked} in an error sent to the client: {text!r}"


_VALID_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def _topics_of(request: Any) -> list[str]:
    items = [*getattr(request, "offsets", ()), *getattr(request, "topics", ()), *getattr(request, "watermarks", ())]
    return sorted({i.topic for i in items if _VALID_TOPIC.fullmatch(i.topic)})


def _storable_group(request: Any) -> str | None:
    group = getattr(request, "group_id", "")
    ok = group and "\x00" not in group and len(group.encode()) <= 255
    return group if ok else None


def seed(store: Store, request: Any) -> None:
    """Gives the request's group offsets, history and watermarks, so that the request meets data."""
    group = _storable_group(request)
    if group is None:
        return
    topics = [*_topics_of(request), "seeded"]
    store.commit_offsets(group, [OffsetCommit(t, p, 10 + p) for t in topics for p in range(3)])
    store.report_watermarks([Watermark(t, p, 5, 20) for t in topics if t != "seeded" for p in range(2)])


def snapshot(engine: sa.Engine, request: Any) -> tuple[object, ...]:
    """Everything stored about the request's group and topics."""
    group = _storable_group(request) or ""
    topics = _topics_of(request)
    with engine.connect() as conn:

        def rows(sql: str) -> list[tuple[object, ...]]:
            return [tuple(r) for r in conn.execute(sa.text(sql), {"g": group, "t": topics})]

        return (
            rows("SELECT generation, reset_count FROM offsetstore.groups WHERE group_id = :g"),
            rows(
                'SELECT topic, partition, "offset", metadata, commit_time FROM offsetstore.offsets '
                "WHERE group_id = :g ORDER BY 1, 2"
            ),
            rows("SELECT count(*), max(id) FROM offsetstore.offset_history WHERE group_id = :g"),
            rows("SELECT * FROM offsetstore.watermarks WHERE topic = ANY(:t) ORDER BY 1, 2"),
        )


@pytest.fixture(scope="module")
def channel(server: ServerHandle) -> Any:
    with grpc.insecure_channel(server.address) as channel:
        yield channel


@pytest.mark.parametrize("method", METHODS)
def test_random_requests_are_judged_never_crash_and_rejected_ones_write_nothing(
    method: str, channel: grpc.Channel, engine: sa.Engine, store: Store, client: OffsetStoreClient
) -> None:
    assert set(REQUESTS) == set(METHODS)

    @FUZZ
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        ns = f"fz{uuid.uuid4().hex[:12]}-"
        request = data.draw(REQUESTS[method](ns), label="request")
        seeded = data.draw(st.booleans(), label="seeded")
        if seeded:
            seed(store, request)
        before = snapshot(engine, request)
        code, text = invoke(channel, method, request.SerializeToString())
        assert code in EXPECTED, (code, text)
        assert_no_leak(text)
        if code != grpc.StatusCode.OK:
            assert snapshot(engine, request) == before, f"a refused {method} wrote something"
        elif method == "CommitOffsets" and request.offsets and not seeded:
            # What was acknowledged is what is stored.
            stored = client.fetch_offsets(request.group_id).offsets
            assert {(c.topic, c.partition): c.offset for c in request.offsets} == {
                tp: o.offset for tp, o in stored.items()
            }

    check()
    assert client.health() == "SERVING"


@FUZZ
@given(
    method=st.sampled_from(METHODS),
    payload=st.one_of(st.binary(max_size=2000), st.binary(min_size=1).map(lambda b: b * 3000)),
)
def test_garbage_bytes_get_invalid_argument_or_a_judgement_never_internal(
    channel: grpc.Channel, client: OffsetStoreClient, method: str, payload: bytes
) -> None:
    code, text = invoke(channel, method, payload)
    assert code in EXPECTED, (code, text)
    assert_no_leak(text)


def test_the_server_is_healthy_after_the_fuzzing(client: OffsetStoreClient, group_id: str) -> None:
    assert client.health() == "SERVING"
    client.commit_offsets(group_id, {("orders", 0): 1})
    assert client.fetch_offsets(group_id).offsets[("orders", 0)].offset == 1
