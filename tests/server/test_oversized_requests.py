"""Oversized requests (issue 34, findings 2 and 3): refused before anything decodes, converts or walks them.

A request's repeated entries are counted on the wire (gRPC, and HTTP's binary codec) and a
JSON body's tokens before it is parsed, so that the 10,000-partition limit is met before the
request costs more than its bytes: a 40 MB CommitOffsets of empty entries used to cost 48 s
of CPU and 4 GB of memory, a 10 MB JSON body 14 s of a frozen event loop. Each test attacks
the real ``offsetstore serve`` of ``tests/fixtures/fix_tenants.py`` and reads what it cost
from ``/proc``: resident memory, with margins many times what the fixed server takes and
many times below what the old one took; no timing is asserted.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import grpc

from offsetstore.client import OffsetStoreClient
from offsetstore.v1 import offset_store_pb2 as pb
from tests.fixtures.fix_auth import TOKENS, fresh
from tests.fixtures.fix_tenants import PARTITION_QUOTA, Peak, Tenants
from tests.fixtures.wire_bytes import _field

MiB = 1 << 20


def empty_commits(group: str, count: int) -> bytes:
    """A CommitOffsets request of ``count`` empty entries: two bytes each on the wire."""
    return _field(1, group.encode()) + b"\x12\x00" * count


def packed_fetch(group: str, count: int) -> bytes:
    """A FetchOffsets request of one selection naming partition 0 ``count`` times: one byte each."""
    selection = _field(1, b"t-topic") + _field(2, b"\x00" * count)
    return _field(1, group.encode()) + _field(2, selection)


# --- 2. over gRPC ---------------------------------------------------------------------------


def test_a_commit_of_too_many_entries_is_refused_before_the_partition_quota_walks_it(tenants: Tenants) -> None:
    with OffsetStoreClient(tenants.served.address, token=TOKENS["root"], timeout=20) as root:
        # The principals' prefix (t-) stores the quota: any new partition of theirs is past it.
        root.commit_offsets(fresh(), {("t-full", p): 1 for p in range(PARTITION_QUOTA)})
    group = fresh()
    refusal = tenants.raw("CommitOffsets", empty_commits(group, 20_001), "committer")
    # Walked by the quota first, it was RESOURCE_EXHAUSTED PARTITION_QUOTA: 20,001 entries
    # converted into one partition set, and a round trip to count it.
    assert (refusal.code, refusal.reason, refusal.fields) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        ["offsets"],
    ), refusal
    assert "at most 10000 partitions" in refusal.message


def test_watermarks_of_too_many_entries_are_refused_before_authorisation_walks_them(tenants: Tenants) -> None:
    entry = pb.Watermark(topic="x-foreign", partition=0, log_end_offset=1).SerializeToString()
    refusal = tenants.raw("ReportWatermarks", _field(1, entry) * 20_001, "committer")
    # The committer may report t- topics only: walked, this was PERMISSION_DENIED on x-foreign.
    assert (refusal.code, refusal.fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["watermarks"]), refusal


def test_oversized_requests_cost_at_most_their_bytes_of_memory(tenants: Tenants) -> None:
    """Four 12 MB calls at once (two principals, two each): 2.8 GB before issue 34, 57x the bytes sent."""
    commit, fetch = empty_commits(fresh(), 6 * MiB), packed_fetch(fresh(), 12 * MiB)
    calls = [("CommitOffsets", commit, "committer"), ("FetchOffsets", fetch, "reader")] * 2
    sent = sum(len(data) for _, data, _ in calls)
    with Peak(tenants.pid) as peak, ThreadPoolExecutor(len(calls)) as pool:
        refusals = list(pool.map(lambda c: tenants.raw(*c), calls))
    print(f"4 x 12 MB: +{peak.growth / MiB:.0f} MiB, {peak.cpu:.2f} CPU s")
    for (method, _, _), refusal in zip(calls, refusals, strict=True):
        field = "offsets" if method == "CommitOffsets" else "topics"
        assert (refusal.code, refusal.fields) == (grpc.StatusCode.INVALID_ARGUMENT, [field]), refusal
    # The transport holds each request's bytes (and copies); decoding them held 57 times as much.
    assert peak.growth < 6 * sent, f"the server grew by {peak.growth / MiB:.0f} MiB for {sent / MiB:.0f} MiB sent"


# --- 3. over HTTP/JSON ----------------------------------------------------------------------


def _keep_committing(tenants: Tenants, stop: threading.Event, answered: list[int]) -> None:
    """Another tenant's gRPC commits, one after another, until ``stop``; every one must be answered."""
    group = fresh()
    with OffsetStoreClient(tenants.served.address, token=TOKENS["root"], timeout=120) as root:
        while not stop.is_set() or not answered:
            root.commit_offsets(group, {("t-victim", 0): len(answered)})
            answered.append(1)


def test_a_json_body_of_millions_of_entries_is_refused_before_it_is_parsed(tenants: Tenants) -> None:
    body = b'{"groupId":"' + fresh().encode() + b'","offsets":[' + b",".join([b"{}"] * (10 * MiB // 3)) + b"]}"
    stop, answered = threading.Event(), []
    victim = threading.Thread(target=_keep_committing, args=(tenants, stop, answered))
    with Peak(tenants.pid) as peak:
        victim.start()
        status, answer = tenants.post("CommitOffsets", body, "committer")
        stop.set()
        victim.join()
    print(f"10 MB of JSON: +{peak.growth / MiB:.0f} MiB, {peak.cpu:.2f} CPU s; {len(answered)} gRPC commits")
    assert (status, answer["code"]) == (400, "invalid_argument"), answer
    assert "more JSON than a CommitOffsets request" in answer["message"]
    assert answered  # the other tenant was served all along
    # Parsed, it took 510 MB: a dict for each of 3.5 million entries, then 3.5 million messages.
    assert peak.growth < 6 * len(body), f"the server grew by {peak.growth / MiB:.0f} MiB"


def test_a_binary_body_of_too_many_entries_is_refused_before_it_is_decoded(tenants: Tenants) -> None:
    body = empty_commits(fresh(), 6 * MiB)
    with Peak(tenants.pid) as peak:
        status, answer = tenants.post("CommitOffsets", body, "committer", {"Content-Type": "application/proto"})
    assert (status, answer["code"]) == (400, "invalid_argument"), answer
    assert answer["message"] == "offsets: at most 10000 partitions in one request"
    assert peak.growth < 6 * len(body), f"the server grew by {peak.growth / MiB:.0f} MiB"


def test_a_json_body_larger_than_the_message_limit_is_refused(tenants: Tenants) -> None:
    # A valid request padded past --max-message-bytes (48 MiB): within the old 4x, it was served.
    group = fresh()
    small = b'{"groupId":"' + group.encode() + b'","offsets":[{"topic":"t-a","partition":0,"offset":"1"}]}'
    body = small[:-1] + b" " * (49 * MiB) + b"}"
    with Peak(tenants.pid) as peak:
        status, answer = tenants.post("CommitOffsets", body, "committer")
    assert (status, answer["code"]) == (429, "resource_exhausted"), answer
    info = next(d["debug"] for d in answer["details"] if d["type"] == "google.rpc.ErrorInfo")
    assert info["metadata"]["limit"] == "message_bytes"
    assert peak.growth < 2 * len(body)
    with OffsetStoreClient(tenants.served.address, token=TOKENS["root"], timeout=20) as root:
        assert root.fetch_offsets(group).offsets == {}  # nothing written


def test_a_token_without_a_grant_for_the_method_is_refused_before_its_body_is_read(tenants: Tenants) -> None:
    body = b'{"groupId":"t-x","offsets":[' + b",".join([b"{}"] * (10 * MiB // 3)) + b"]}"
    with Peak(tenants.pid) as peak:
        status, answer = tenants.post("CommitOffsets", body, "reader")  # may read, never commit
    assert (status, answer["code"]) == (403, "permission_denied"), answer
    assert answer["message"] == "reader may not commit to any group"
    assert peak.growth < 6 * len(body)
