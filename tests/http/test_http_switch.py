"""Issue 58 over HTTP: a group's Kafka cluster and fingerprints in DescribeGroup, a switch through ResetOffsets."""

from __future__ import annotations

import base64
import uuid
from typing import TYPE_CHECKING

from offsetstore import storage
from offsetstore.core.types import OffsetCommit, RecordFingerprint, TopicPartition
from offsetstore.storage.clusters import bind_cluster, write_fingerprints

if TYPE_CHECKING:
    from tests.fixtures.fix_http import HttpServer


def test_describe_shows_the_cluster_and_a_switch_over_http_rebinds(http_server: HttpServer, engine, groups) -> None:
    group = f"http-switch-{uuid.uuid4().hex[:10]}"
    with engine.begin() as conn:  # what the Kafka recipe's writer does in its join and commit transactions
        generation = storage.join_group(conn, group)
        bind_cluster(conn, group, "cluster-A")
        storage.commit_offsets(conn, group, [OffsetCommit("orders", 0, 42)], generation=generation)
        write_fingerprints(
            conn, group, {TopicPartition("orders", 0): RecordFingerprint(42, 1_700_000_000_000, b"\x01" * 16)}
        )

    status, described = http_server.curl("DescribeGroup", {"groupId": group})
    assert status == 200, described
    assert described["kafkaClusterId"] == "cluster-A"
    assert described["partitions"][0]["fingerprint"] == {
        "offset": "42",
        "timestampMs": "1700000000000",
        "digest": base64.b64encode(b"\x01" * 16).decode(),
    }
    shown = groups("describe", group, "--output", "json")
    assert shown.code == 0 and shown.json()["kafka_cluster_id"] == "cluster-A"
    assert shown.json()["partitions"][0]["fingerprint"] == {"timestamp_ms": 1_700_000_000_000, "digest": "01" * 16}

    body = {
        "groupId": group,
        "topics": [{"topic": "A.orders", "partitions": [0]}],
        "toOffsets": {"offsets": [{"topic": "A.orders", "partition": 0, "offset": "40"}]},
        "switchToClusterId": "cluster-B",
        "expectedGeneration": str(generation),
    }
    status, switched = http_server.curl("ResetOffsets", body)
    assert status == 200, switched
    assert [(c["topic"], c["newOffset"], c["kind"], c["source"]) for c in switched["changes"]] == [
        ("A.orders", "40", "CHANGE_KIND_SWITCH", "switch from cluster cluster-A to cluster-B")
    ]
    status, described = http_server.curl("DescribeGroup", {"groupId": group})
    assert described["kafkaClusterId"] == "cluster-B"


def test_a_json_writer_binds_at_join_and_commits_fingerprints(http_server: HttpServer) -> None:
    """What the AtLeastOnceCommitter sends over gRPC, as JSON: the join's cluster id and the commit's fingerprints."""
    group = f"http-bind-{uuid.uuid4().hex[:10]}"
    status, joined = http_server.curl("JoinGroup", {"groupId": group, "kafkaClusterId": "cluster-A"})
    assert status == 200, joined
    digest = base64.b64encode(bytes(range(16))).decode()
    body = {
        "groupId": group,
        "generation": joined["generation"],
        "offsets": [
            {"topic": "orders", "partition": 0, "offset": "42"},
            {"topic": "orders", "partition": 1, "offset": "7"},
        ],
        "fingerprints": [
            {
                "topic": "orders",
                "partition": 0,
                "fingerprint": {"offset": "42", "timestampMs": "1700000000000", "digest": digest},
            }
        ],
    }
    status, committed = http_server.curl("CommitOffsets", body)
    assert status == 200, committed
    status, described = http_server.curl("DescribeGroup", {"groupId": group})
    assert described["kafkaClusterId"] == "cluster-A"
    assert [p.get("fingerprint") for p in described["partitions"]] == [
        {"offset": "42", "timestampMs": "1700000000000", "digest": digest},
        None,
    ]

    status, refused = http_server.curl("JoinGroup", {"groupId": group, "kafkaClusterId": "cluster-B"})
    assert (status, refused["code"], http_server.reason(refused)) == (400, "failed_precondition", "CLUSTER_MISMATCH")
    body["fingerprints"][0]["fingerprint"]["digest"] = base64.b64encode(b"short").decode()
    status, refused = http_server.curl("CommitOffsets", body)
    assert (status, refused["code"], http_server.reason(refused)) == (400, "invalid_argument", "INVALID_ARGUMENT")
    status, described_after = http_server.curl("DescribeGroup", {"groupId": group})
    assert described_after["generation"] == described["generation"]  # neither refusal wrote anything
    assert [p["offset"] for p in described_after["partitions"]] == ["42", "7"]
