"""Issue 49's adoption over HTTP/JSON: ResetOffsets with toOffsets and a source, as curl sends it."""

from __future__ import annotations

import uuid


def test_an_adoption_over_http_sets_each_offset_and_records_its_source(http_server) -> None:
    group = f"http-adopt-{uuid.uuid4().hex[:8]}"
    body = {
        "groupId": group,
        "topics": [{"topic": "orders", "partitions": [0, 1]}],
        "toOffsets": {
            "offsets": [
                {"topic": "orders", "partition": 0, "offset": "40"},
                {"topic": "orders", "partition": 1, "offset": "41"},
            ]
        },
        "source": "kafka group legacy at kafka:9092",
    }
    status, answer = http_server.curl("ResetOffsets", body)
    assert status == 200, answer
    assert sorted((c["partition"], c["newOffset"], c["kind"]) for c in answer["changes"]) == [
        (0, "40", "CHANGE_KIND_ADOPT"),
        (1, "41", "CHANGE_KIND_ADOPT"),
    ]
    status, history = http_server.curl("ListOffsetHistory", {"groupId": group})
    assert status == 200, history
    assert {c["source"] for c in history["changes"]} == {"kafka group legacy at kafka:9092"}

    # toOffsets without its partitions in topics is refused, naming the field, and changes nothing.
    status, refused = http_server.curl(
        "ResetOffsets",
        {"groupId": f"{group}-x", "toOffsets": {"offsets": [{"topic": "orders", "partition": 0, "offset": "1"}]}},
    )
    assert status == 400, refused
    assert http_server.reason(refused) == "INVALID_ARGUMENT"
