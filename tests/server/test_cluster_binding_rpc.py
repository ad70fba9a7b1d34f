"""Issue 58 over gRPC: JoinGroup binds a group to its Kafka cluster, CommitOffsets stores fingerprints with its offsets."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from offsetstore.client import (
    AsyncOffsetStoreClient,
    ClusterMismatchError,
    OffsetCommit,
    OffsetMismatchError,
    RecordFingerprint,
    StaleGenerationError,
)
from offsetstore.v1 import offset_store_pb2 as pb

DIGEST = bytes(range(16))


def fp(offset: int, timestamp_ms: int = 1_700_000_000_000, digest: bytes = DIGEST) -> RecordFingerprint:
    return RecordFingerprint(offset, timestamp_ms, digest)


def fingerprints_of(client, group_id: str) -> dict[tuple[str, int], RecordFingerprint | None]:
    return {(p.topic, p.partition): p.fingerprint for p in client.describe_group(group_id).partitions}


def test_a_join_binds_the_group_and_a_join_from_another_cluster_is_refused_moving_nothing(client, group_id, topic):
    generation = client.join_group(group_id, "m1", kafka_cluster_id="cluster-A")
    client.commit_offsets(group_id, {(topic, 0): 5}, generation=generation)
    assert client.describe_group(group_id).kafka_cluster_id == "cluster-A"
    again = client.join_group(group_id, "m2", kafka_cluster_id="cluster-A")  # its own cluster: a join as ever
    assert again == generation + 1

    with pytest.raises(ClusterMismatchError) as refused:
        client.join_group(group_id, "m3", kafka_cluster_id="cluster-B")
    assert refused.value.metadata == {"group_id": group_id, "bound_cluster_id": "cluster-A", "cluster_id": "cluster-B"}
    assert "cluster-A" in refused.value.message and "cluster-B" in refused.value.message
    # Nothing written: the generation did not move (the writer of A still commits), the binding stays.
    assert client.fetch_offsets(group_id).generation == again
    client.commit_offsets(group_id, {(topic, 0): 6}, generation=again)
    assert client.describe_group(group_id).kafka_cluster_id == "cluster-A"
    # A join that names no cluster (an older client) is not checked: binding is opt-in per writer.
    assert client.join_group(group_id, "m4") == again + 1


def test_a_join_binds_an_older_unbound_group(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 1})
    assert client.describe_group(group_id).kafka_cluster_id == ""
    client.join_group(group_id, kafka_cluster_id="cluster-A")
    assert client.describe_group(group_id).kafka_cluster_id == "cluster-A"


def test_fingerprints_are_stored_with_their_offsets(client, group_id, topic):
    generation = client.join_group(group_id, kafka_cluster_id="cluster-A")
    client.commit_offsets(
        group_id, {(topic, 0): 10, (topic, 1): 7}, generation=generation, fingerprints={(topic, 0): fp(10)}
    )
    assert fingerprints_of(client, group_id) == {(topic, 0): fp(10), (topic, 1): None}
    # The next commit's fingerprint replaces it; a commit without one leaves the old one, which
    # no longer shows: it is of an offset that is not the stored one.
    client.commit_offsets(
        group_id, {(topic, 0): 12, (topic, 1): 9}, generation=generation, fingerprints={(topic, 1): fp(9, 5)}
    )
    assert fingerprints_of(client, group_id) == {(topic, 0): None, (topic, 1): fp(9, 5)}


def test_a_refused_commit_stores_no_fingerprint(client, group_id, topic):
    generation = client.join_group(group_id, kafka_cluster_id="cluster-A")
    client.commit_offsets(group_id, {(topic, 0): 10}, generation=generation, fingerprints={(topic, 0): fp(10)})
    client.join_group(group_id, kafka_cluster_id="cluster-A")  # a newer writer fences the first
    with pytest.raises(StaleGenerationError):
        client.commit_offsets(group_id, {(topic, 0): 20}, generation=generation, fingerprints={(topic, 0): fp(20, 2)})
    with pytest.raises(OffsetMismatchError):
        client.commit_offsets(
            group_id, [OffsetCommit(topic, 0, 30, expected_offset=11)], fingerprints={(topic, 0): fp(30, 3)}
        )
    assert fingerprints_of(client, group_id) == {(topic, 0): fp(10)}
    assert client.fetch_offsets(group_id).offsets[(topic, 0)].offset == 10


def test_concurrent_commits_batched_together_keep_each_groups_fingerprint_of_its_offset(server, client, topic):
    """Commits share a transaction (group commit), a group's too: its fingerprint is always of its stored offset."""
    groups = [f"fp-batch-{i}-{topic}" for i in range(8)]

    def mark(n: int) -> RecordFingerprint:
        return fp(n, n, bytes([n]) * 16)

    for g in groups:  # DescribeGroup shows the fingerprints of a bound group's partitions
        client.join_group(g, kafka_cluster_id="cluster-A")

    async def commit_all() -> None:
        async with AsyncOffsetStoreClient(server.address, timeout=20) as aclient:
            for round_ in range(10):  # rounds of 24 calls, under the server's calls per peer
                await asyncio.gather(
                    *(
                        aclient.commit_offsets(g, {(topic, 0): n}, fingerprints={(topic, 0): mark(n)})
                        for n in range(3 * round_ + 1, 3 * round_ + 4)
                        for g in groups
                    )
                )

    asyncio.run(commit_all())
    for g in groups:
        (status,) = client.describe_group(g).partitions
        assert status.offset in (28, 29, 30) and status.fingerprint == mark(status.offset)


def _refused(stub, method: str, request) -> tuple[grpc.StatusCode, str, list[str]]:
    with pytest.raises(grpc.RpcError) as caught:
        getattr(stub, method)(request)
    status: status_pb2.Status = rpc_status.from_call(caught.value)
    info, bad = error_details_pb2.ErrorInfo(), error_details_pb2.BadRequest()
    for detail in status.details:
        if detail.Is(info.DESCRIPTOR):
            detail.Unpack(info)
        elif detail.Is(bad.DESCRIPTOR):
            detail.Unpack(bad)
    return caught.value.code(), info.reason, [v.field for v in bad.field_violations]


def _fingerprint(topic: str, partition: int, offset: int, timestamp_ms: int = 1, digest: bytes = DIGEST):
    return pb.PartitionFingerprint(
        topic=topic,
        partition=partition,
        fingerprint=pb.RecordFingerprint(offset=offset, timestamp_ms=timestamp_ms, digest=digest),
    )


@pytest.mark.parametrize(
    ("fingerprints", "fields"),
    [
        (lambda t: [_fingerprint(t, 0, 10, digest=b"\x00" * 15)], ["fingerprints[0].fingerprint.digest"]),
        (lambda t: [_fingerprint(t, 0, 10, digest=b"\x00" * 17)], ["fingerprints[0].fingerprint.digest"]),
        (lambda t: [_fingerprint(t, 0, 10, digest=b"")], ["fingerprints[0].fingerprint.digest"]),
        (lambda t: [_fingerprint(t, 0, 10, timestamp_ms=-1)], ["fingerprints[0].fingerprint.timestamp_ms"]),
        (lambda t: [_fingerprint(t, 0, 9)], ["fingerprints[0].fingerprint.offset"]),
        (lambda t: [_fingerprint(t, 5, 10)], ["fingerprints[0].partition"]),
        (lambda t: [_fingerprint("other", 0, 10)], ["fingerprints[0].partition"]),
        (lambda t: [_fingerprint(t, 0, 10), _fingerprint(t, 0, 10)], ["fingerprints[1].partition"]),
        (lambda t: [pb.PartitionFingerprint(topic=t, partition=0)], ["fingerprints[0].fingerprint"]),
        (
            lambda t: [_fingerprint(t, 0, 10, timestamp_ms=-5, digest=b"x"), _fingerprint(t, 3, 1)],
            [
                "fingerprints[0].fingerprint.timestamp_ms",
                "fingerprints[0].fingerprint.digest",
                "fingerprints[1].partition",
            ],
        ),
    ],
)
def test_bad_fingerprints_are_invalid_argument_and_write_nothing(stub, client, group_id, topic, fingerprints, fields):
    request = pb.CommitOffsetsRequest(
        group_id=group_id,
        offsets=[pb.OffsetCommit(topic=topic, partition=0, offset=10)],
        fingerprints=fingerprints(topic),
    )
    code, reason, named = _refused(stub, "CommitOffsets", request)
    assert (code, reason, named) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", fields)
    assert client.fetch_offsets(group_id).offsets == {}


def test_a_fingerprint_of_offset_0_is_refused(stub, group_id, topic):
    """No record precedes offset 0."""
    request = pb.CommitOffsetsRequest(
        group_id=group_id,
        offsets=[pb.OffsetCommit(topic=topic, partition=0, offset=0)],
        fingerprints=[_fingerprint(topic, 0, 0)],
    )
    assert _refused(stub, "CommitOffsets", request)[2] == ["fingerprints[0].fingerprint.offset"]


@pytest.mark.parametrize("cluster_id", ["x" * 256, "a\x00b", "é" * 128])
def test_a_bad_cluster_id_is_invalid_argument_and_joins_nothing(stub, client, group_id, cluster_id):
    request = pb.JoinGroupRequest(group_id=group_id, kafka_cluster_id=cluster_id)
    assert _refused(stub, "JoinGroup", request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        ["kafka_cluster_id"],
    )
    assert client.fetch_offsets(group_id).generation == 0


def test_the_longest_cluster_id_binds(client, group_id):
    client.join_group(group_id, kafka_cluster_id="c" * 255)
    assert client.describe_group(group_id).kafka_cluster_id == "c" * 255


def test_a_mismatch_is_failed_precondition_on_the_wire(stub, client, group_id):
    client.join_group(group_id, kafka_cluster_id="cluster-A")
    code, reason, _ = _refused(stub, "JoinGroup", pb.JoinGroupRequest(group_id=group_id, kafka_cluster_id="cluster-B"))
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "CLUSTER_MISMATCH")


def test_an_unfenced_committer_with_a_consumer_is_refused(client, group_id):
    """Unfenced, a switch could not stop it: it would go on committing (and fingerprinting) the old cluster's records."""
    from offsetstore.kafka_integration import AtLeastOnceCommitter

    with pytest.raises(ValueError, match="fenced"):
        AtLeastOnceCommitter(client, group_id, fenced=False, consumer=object())  # type: ignore[arg-type]
