"""Every RPC declares its facts in the contract, and everything that needs them reads them from there."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor_pb2 import MethodOptions

from offsetstore.client._base import unknown_outcome
from offsetstore.client._channel import RETRIED_METHODS
from offsetstore.core.calls import BY_REQUEST, FACTS, SERVICE, Cost, Counted, Permission, Scan, Scope, facts_of
from offsetstore.server.admission import cost_of
from offsetstore.server.auth import RPC_PERMISSIONS
from offsetstore.server.call import Call
from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import options_pb2


def test_every_method_of_the_service_declares_its_facts() -> None:
    # FACTS is built at import from the descriptor: a method without (offsetstore.v1.call) fails it.
    assert set(FACTS) == {m.name for m in SERVICE.methods}
    assert set(BY_REQUEST) == {m.input_type.name for m in SERVICE.methods}
    for method in SERVICE.methods:
        assert method.GetOptions().HasExtension(options_pb2.call), method.name
        request = getattr(pb, method.input_type.name)()
        cost_of(Call(FACTS[method.name], request))  # every cost rule applies to its own request


def _method_without_facts() -> descriptor_pb2.MethodDescriptorProto:
    return descriptor_pb2.MethodDescriptorProto(
        name="ListTopicsOfNothing",
        input_type=".offsetstore.v1.JoinGroupRequest",
        output_type=".offsetstore.v1.JoinGroupResponse",
    )


def _service_with(method: descriptor_pb2.MethodDescriptorProto) -> Any:
    """The real contract plus ``method``, in a pool of its own: what a careless edit of the .proto makes."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(file: Any) -> None:
        if file.name in added:
            return
        for dependency in file.dependencies:
            add(dependency)
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        if file is pb.DESCRIPTOR:
            proto.service[0].method.append(method)
        pool.Add(proto)
        added.add(file.name)

    add(pb.DESCRIPTOR)
    return pool.FindServiceByName(SERVICE.full_name).methods_by_name[method.name]


def test_a_method_without_facts_is_refused() -> None:
    with pytest.raises(ValueError, match="declares no"):
        facts_of(_service_with(_method_without_facts()))


def test_a_write_that_may_not_be_retried_must_say_how_to_find_out_what_it_did() -> None:
    method = _method_without_facts()
    facts = options_pb2.CallFacts(
        permission=options_pb2.PERMISSION_COMMIT, scope=options_pb2.SCOPE_GROUP, cost=options_pb2.COST_RULE_ONE
    )
    method.options.Extensions[options_pb2.call].CopyFrom(facts)
    with pytest.raises(ValueError, match="unknown_outcome"):
        facts_of(_service_with(method))
    method.options.idempotency_level = MethodOptions.IDEMPOTENT
    assert facts_of(_service_with(method)).retried


def test_the_gate_the_quotas_and_the_clients_read_the_same_facts() -> None:
    assert RPC_PERMISSIONS == {name: f.permission for name, f in FACTS.items()}
    assert set(RETRIED_METHODS) == {
        "FetchOffsets",
        "ListGroups",
        "DescribeGroup",
        "ListOffsetHistory",
        "ListTopics",
        "ReportWatermarks",
        "ObserveOffsets",
    }
    writes = {name for name, f in FACTS.items() if f.unknown_outcome}
    assert writes == {"CommitOffsets", "ResetOffsets", "DeleteOffsets", "JoinGroup", "ExpireGroups"}
    assert {n for n, f in FACTS.items() if f.creates_group} == {
        "CommitOffsets",
        "JoinGroup",
        "ResetOffsets",
        "ObserveOffsets",
    }
    assert {n for n, f in FACTS.items() if f.adds_partitions} == {"CommitOffsets", "ResetOffsets", "ObserveOffsets"}
    assert {n for n, f in FACTS.items() if f.scope is Scope.PREFIX} == {"ListGroups", "ExpireGroups"}
    assert FACTS["ReportWatermarks"].scope is Scope.TOPICS and FACTS["ReportWatermarks"].cost is Cost.ENTRIES
    assert FACTS["DeleteOffsets"].permission is Permission.ADMIN


def test_a_preview_has_no_unknown_outcome_and_a_write_says_how_to_find_out() -> None:
    assert unknown_outcome(pb.ResetOffsetsRequest(dry_run=True)) is None
    assert unknown_outcome(pb.ExpireGroupsRequest(execute=False)) is None
    assert unknown_outcome(pb.FetchOffsetsRequest()) is None
    assert "fetch the offsets" in (unknown_outcome(pb.CommitOffsetsRequest()) or "")
    assert "list the groups" in (unknown_outcome(pb.ExpireGroupsRequest(execute=True)) or "")


def test_a_method_without_facts_has_no_call() -> None:
    with pytest.raises(KeyError):
        Call(FACTS["NoSuchMethod"], pb.JoinGroupRequest())


def test_what_a_call_writes_and_counts_is_declared_not_inferred() -> None:
    # The entries a call writes (an empty list: it creates nothing) and the store counters it
    # feeds are facts of the .proto: the quotas and the metrics read them, not a method's name
    # or its cost rule.
    assert {m: f.entries_field for m, f in FACTS.items() if f.entries_field} == {
        "CommitOffsets": "offsets",
        "ObserveOffsets": "offsets",
    }
    counted = {m: f.counted for m, f in FACTS.items() if f.counted is not Counted.NOTHING}
    assert counted == {"CommitOffsets": Counted.COMMITS, "ResetOffsets": Counted.RESETS}
    commit = FACTS["CommitOffsets"]
    assert len(commit.entries(pb.CommitOffsetsRequest(offsets=[pb.OffsetCommit(topic="t")] * 3))) == 3
    assert FACTS["JoinGroup"].entries(pb.JoinGroupRequest()) == ()


def test_what_a_read_scans_beyond_its_page_is_declared() -> None:
    # The admission weighs these reads by what they scan (server/scan_cost.py), read from the facts.
    assert {n: f.scan for n, f in FACTS.items() if f.scan is not Scan.NOTHING} == {
        "DescribeGroup": Scan.VERDICT,  # the whole group, unless a kept verdict serves the first page
        "ListTopics": Scan.GROUP,
        "ListGroups": Scan.PREFIX,
    }
    describe = FACTS["DescribeGroup"]
    assert describe.scans(pb.DescribeGroupRequest(group_id="g", page_size=1)) is Scan.VERDICT
    # A later page of a description scans nothing: the verdict came with the first.
    assert describe.scans(pb.DescribeGroupRequest(group_id="g", page_token="next")) is Scan.NOTHING
    assert FACTS["ListTopics"].scans(pb.ListTopicsRequest(group_id="g", page_token="next")) is Scan.GROUP
    assert FACTS["CommitOffsets"].scans(pb.CommitOffsetsRequest(group_id="g")) is Scan.NOTHING


def test_a_scan_of_fields_the_request_lacks_is_refused() -> None:
    method = _method_without_facts()  # takes a JoinGroupRequest: a group_id, no prefix
    facts = options_pb2.CallFacts(
        permission=options_pb2.PERMISSION_READ,
        scope=options_pb2.SCOPE_GROUP,
        cost=options_pb2.COST_RULE_ONE,
        scan=options_pb2.SCAN_PREFIX,
    )
    method.options.Extensions[options_pb2.call].CopyFrom(facts)
    method.options.idempotency_level = MethodOptions.NO_SIDE_EFFECTS
    with pytest.raises(ValueError, match="scans by PREFIX"):
        facts_of(_service_with(method))
    facts.scan = options_pb2.SCAN_GROUP
    facts.scan_skipped_by = "page_token"
    method.options.Extensions[options_pb2.call].CopyFrom(facts)
    with pytest.raises(ValueError, match="'page_token'"):
        facts_of(_service_with(method))


def test_no_server_module_tells_a_call_by_its_methods_name() -> None:
    # The policies and the metrics read facts (the .proto's options); a literal RPC name in a
    # comparison or a branch would be a fact kept outside the contract.
    names = {m.name for m in SERVICE.methods}
    server = Path(__file__).resolve().parents[2] / "server"
    found = [
        f"{path.relative_to(server.parent)}:{node.lineno} {node.value!r}"
        for path in sorted(server.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value in names
    ]
    assert found == []
