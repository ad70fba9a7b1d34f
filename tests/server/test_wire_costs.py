"""Every repeated field of every request declares its cost in the .proto, and the wire count reads them all (issue 56, item 2).

The gate counts a request's partitions on the wire before it decodes it
(:mod:`offsetstore.server.wire`), from the ``entry_cost`` option each repeated field
declares: a field added without one is caught here (and fails the server at import), instead
of slipping past the count as ``ResetOffsets.to_offsets`` did.
"""

from __future__ import annotations

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import given, settings
from hypothesis import strategies as st

from offsetstore.core.calls import SERVICE
from offsetstore.server import wire
from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import options_pb2
from tests.fixtures.wire_bytes import _field

REQUESTS = sorted({m.input_type.full_name: m.input_type for m in SERVICE.methods}.items())


def repeated_fields(descriptor: Descriptor, seen: set[str] | None = None) -> list[FieldDescriptor]:
    """Every repeated field reachable from ``descriptor``, nested messages included (walked here, not by wire.py)."""
    seen = set() if seen is None else seen
    if descriptor.full_name in seen:
        return []
    seen.add(descriptor.full_name)
    found = []
    for f in descriptor.fields:
        if f.is_repeated:
            found.append(f)
        if f.message_type is not None:
            found += repeated_fields(f.message_type, seen)
    return found


@pytest.mark.parametrize(("name", "request_type"), REQUESTS, ids=[n for n, _ in REQUESTS])
def test_every_repeated_field_of_every_request_declares_its_cost(name: str, request_type: Descriptor) -> None:
    for f in repeated_fields(request_type):
        assert f.GetOptions().HasExtension(options_pb2.entry_cost), f"{f.full_name} declares no entry_cost"  # type: ignore[arg-type]
    assert wire.undeclared(request_type) == []
    wire.plan(request_type)


def test_the_walk_reaches_the_nested_lists() -> None:
    names = {f.full_name for _, d in REQUESTS for f in repeated_fields(d)}
    assert {"offsetstore.v1.OffsetTargets.offsets", "offsetstore.v1.TopicSelection.partitions"} <= names


def _contract_with(add: dict[str, descriptor_pb2.FieldDescriptorProto]) -> descriptor_pool.DescriptorPool:
    """A pool holding a copy of the contract, with ``add`` (message name -> a new field) added to its messages."""
    pool = descriptor_pool.DescriptorPool()
    for file in (
        "google/protobuf/descriptor.proto",
        "google/protobuf/duration.proto",
        "google/protobuf/timestamp.proto",
    ):
        proto = descriptor_pb2.FileDescriptorProto()
        descriptor_pool.Default().FindFileByName(file).CopyToProto(proto)
        pool.Add(proto)
    for module in (options_pb2, pb):
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        for message in proto.message_type:
            if message.name in add:
                message.field.append(add[message.name])
        pool.Add(proto)
    return pool


def _repeated(name: str, number: int, **kind: object) -> descriptor_pb2.FieldDescriptorProto:
    return descriptor_pb2.FieldDescriptorProto(
        name=name, number=number, label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED, **kind
    )


STRING = {"type": descriptor_pb2.FieldDescriptorProto.TYPE_STRING}
INT32 = {"type": descriptor_pb2.FieldDescriptorProto.TYPE_INT32}


def test_a_repeated_field_added_without_a_cost_is_caught() -> None:
    # A new list on a request, and one nested two levels down (inside the adoption list's entries).
    pool = _contract_with(
        {"CommitOffsetsRequest": _repeated("tags", 99, **STRING), "PartitionOffset": _repeated("leaders", 98, **INT32)}
    )
    commit = pool.FindMessageTypeByName("offsetstore.v1.CommitOffsetsRequest")
    reset = pool.FindMessageTypeByName("offsetstore.v1.ResetOffsetsRequest")
    assert wire.undeclared(commit) == ["offsetstore.v1.CommitOffsetsRequest.tags"]
    assert wire.undeclared(reset) == ["offsetstore.v1.PartitionOffset.leaders"]
    for request in (commit, reset):
        with pytest.raises(ValueError, match="no \\(offsetstore.v1.entry_cost\\) declared"):
            wire.plan(request)
    # The same field declared: planned, and counted.
    declared = _repeated("tags", 99, **STRING)
    declared.options.Extensions[options_pb2.entry_cost] = options_pb2.ENTRY_COST_PARTITION  # type: ignore[index]
    commit = _contract_with({"CommitOffsetsRequest": declared}).FindMessageTypeByName(
        "offsetstore.v1.CommitOffsetsRequest"
    )
    assert wire.undeclared(commit) == []
    assert wire.count_entries(commit, b"\x12\x00" + b"\x9a\x06\x01a" * 3) == {"offsets": 1, "tags": 3}


def adoption(group: str, count: int, topic: str = "t-a") -> bytes:
    """A ResetOffsets request whose ``to_offsets`` lists ``count`` partitions (and ``topics`` one)."""
    entry = _field(1, pb.PartitionOffset(topic=topic, partition=1, offset=5).SerializeToString())
    selection = pb.TopicSelection(topic=topic, partitions=[1]).SerializeToString()
    return _field(1, group.encode()) + _field(2, selection) + _field(11, entry * count)


def test_the_adoption_list_is_counted_on_the_wire() -> None:
    descriptor = pb.ResetOffsetsRequest.DESCRIPTOR
    assert wire.count_entries(descriptor, adoption("t-g", 3)) == {"topics": 1, "to_offsets.offsets": 3}
    # Counting stops just past the limit, whatever the request's size.
    assert wire.count_entries(descriptor, adoption("t-g", 200_000)) == {"topics": 1, "to_offsets.offsets": 10_001}
    with pytest.raises(wire.InvalidArgumentError) as refused:
        wire.check_entries(descriptor, adoption("t-g", 10_001), "ResetOffsets")
    assert refused.value.message == "to_offsets.offsets: at most 10000 partitions in one request"
    assert wire.check_entries(descriptor, adoption("t-g", 10_000), "ResetOffsets") == 10_000  # what it is charged


def test_a_valid_adoption_of_ten_thousand_partitions_passes_the_count() -> None:
    # One selection per partition, as a list of partitions of many topics makes: 30,000 fields
    # with the selections' topics; the old budget (2 fields a partition) refused it.
    request = pb.ResetOffsetsRequest(
        group_id="t-g",
        topics=[pb.TopicSelection(topic=f"t-{p}", partitions=[0]) for p in range(10_000)],
        to_offsets=pb.OffsetTargets(offsets=[pb.PartitionOffset(topic=f"t-{p}", partition=0) for p in range(10_000)]),
    )
    assert wire.check_entries(request.DESCRIPTOR, request.SerializeToString(), "ResetOffsets") == 10_000


_selections = st.lists(
    st.builds(
        pb.TopicSelection,
        topic=st.text("t-ab", min_size=1, max_size=5),
        partitions=st.lists(st.integers(0, 2**31 - 1), max_size=20),
    ),
    max_size=10,
)
_targets = st.lists(
    st.builds(
        pb.PartitionOffset,
        topic=st.text("t-ab", max_size=5),
        partition=st.integers(0, 2**31 - 1),
        offset=st.integers(-2, 2**63 - 1),
    ),
    max_size=30,
)


@settings(derandomize=True, max_examples=300, deadline=None)
@given(topics=_selections, targets=st.none() | _targets, group=st.text(max_size=20))
def test_the_wire_count_is_what_the_decoded_request_holds(topics, targets, group) -> None:
    request = pb.ResetOffsetsRequest(group_id=group, topics=topics, source="s")
    if targets is not None:
        request.to_offsets.offsets.extend(targets)
    expected = {"topics": sum(max(1, len(t.partitions)) for t in topics)} if topics else {}
    if targets:
        expected["to_offsets.offsets"] = len(targets)
    assert wire.count_entries(request.DESCRIPTOR, request.SerializeToString()) == expected


@settings(derandomize=True, max_examples=500, deadline=None)
@given(data=st.binary(max_size=200))
def test_any_bytes_are_counted_or_malformed(data: bytes) -> None:
    for descriptor in (
        pb.ResetOffsetsRequest.DESCRIPTOR,
        pb.CommitOffsetsRequest.DESCRIPTOR,
        pb.FetchOffsetsRequest.DESCRIPTOR,
    ):
        try:
            counts = wire.count_entries(descriptor, data)
        except wire.MalformedError:
            continue
        assert all(0 <= n <= 10_001 for n in counts.values())
