"""The committed generated code matches the .proto, and the contract's names are all there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from offsetstore.v1 import offset_store_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ("offset_store_pb2.py", "offset_store_pb2.pyi", "offset_store_pb2_grpc.py")


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--out", str(tmp_path)], check=True)
    for name in GENERATED:
        fresh = (tmp_path / "offsetstore" / "v1" / name).read_text()
        committed = (ROOT / "proto" / "offsetstore" / "v1" / name).read_text()
        assert fresh == committed, f"{name} is stale: run `make proto` and commit the result"


def test_contract_rpcs() -> None:
    service = pb.DESCRIPTOR.services_by_name["OffsetStoreService"]
    assert service.full_name == "offsetstore.v1.OffsetStoreService"
    rpcs = {m.name: (m.input_type.name, m.output_type.name) for m in service.methods}
    for name in (
        "CommitOffsets",
        "FetchOffsets",
        "ResetOffsets",
        "DeleteOffsets",
        "JoinGroup",
        "ListGroups",
        "DescribeGroup",
        "ListOffsetHistory",
        "ReportWatermarks",
    ):
        assert rpcs[name] == (f"{name}Request", f"{name}Response")


def test_contract_fields() -> None:
    def fields(message: str) -> set[str]:
        return set(pb.DESCRIPTOR.message_types_by_name[message].fields_by_name)

    assert fields("OffsetCommit") == {"topic", "partition", "offset", "metadata", "expected_offset"}
    assert fields("CommittedOffset") == {"topic", "partition", "offset", "metadata", "commit_time"}
    assert fields("OffsetChange") == {
        "topic",
        "partition",
        "previous_offset",
        "new_offset",
        "kind",
        "generation",
        "change_time",
        "actor",
        "source",  # issue 49: where an adoption's offsets came from
    }
    assert {
        "group_id",
        "topics",
        "all_topics",
        "to_offset",
        "shift_by",
        "to_boundary",
        "to_commit_time",
        "dry_run",
    } <= fields("ResetOffsetsRequest")
    assert fields("GroupSummary") == {
        "group_id",
        "generation",
        "partition_count",
        "last_commit_time",
        "total_lag",
        "observed",  # issue 57: a group whose pipeline keeps its own positions, and where they are read
        "observed_source",
        "observed_lost_partitions",  # a Kafka group's offsets expired or deleted
    }
    assert fields("PartitionStatus") == {
        "topic",
        "partition",
        "offset",
        "metadata",
        "commit_time",
        "log_end_offset",
        "lag",
        "offset_past_log_end",  # issue 23: an offset past the log end is an anomaly, not lag 0
        "log_start_offset",
        "lag_seconds",  # issue 26: lag in time, -1 with its status when unknown
        "lag_seconds_status",
        "status",  # issue 36: the verdict, its reason, and when the watermark was seen
        "status_reason",
        "watermark_time",
        "lag_history",  # the console's sparkline, only when asked
        "fingerprint",  # issue 58: the record before the offset, which a switch finds on another cluster
    }
    assert fields("Watermark") == {"topic", "partition", "log_start_offset", "log_end_offset"}
    assert set(pb.Boundary.keys()) == {"BOUNDARY_UNSPECIFIED", "BOUNDARY_EARLIEST", "BOUNDARY_LATEST"}
    assert set(pb.ChangeKind.keys()) == {
        "CHANGE_KIND_UNSPECIFIED",
        "CHANGE_KIND_COMMIT",
        "CHANGE_KIND_RESET",
        "CHANGE_KIND_DELETE",
        "CHANGE_KIND_EXPIRE",
        "CHANGE_KIND_ADOPT",  # issue 49: a reset that took positions over from another system
        "CHANGE_KIND_OBSERVED",  # issue 57: a position observed in a pipeline that keeps its own
        "CHANGE_KIND_SWITCH",  # issue 58: a reset that moved the group to another Kafka cluster
    }
