"""How a CDC position is named and stored: topics of source partitions, LSN notation, metadata, JDBC URLs."""

from __future__ import annotations

import json

import pytest

from offsetstore.connect_integration import engine_properties, format_lsn, jdbc_url, parse_lsn, position_of, topic_of
from offsetstore.connect_integration.positions import metadata_of


def test_a_source_partition_names_a_valid_topic() -> None:
    assert topic_of({"server": "shop"}) == "shop"
    assert topic_of({"server": "a", "database": "b"}) == "b.a"  # by key: database, server
    assert topic_of({"server": "my server/1"}) == "my_server_1"
    assert topic_of({"server": True}) == "true"  # as Java prints it
    assert topic_of({}) == "_"
    assert len(topic_of({"server": "x" * 300})) == 249


@pytest.mark.parametrize(("text", "value"), [("0/0", 0), ("0/1A8B059", 27832409), ("16/B374D848", 97500059720)])
def test_lsn_notation_both_ways(text: str, value: int) -> None:
    assert parse_lsn(text) == value
    assert format_lsn(value) == text
    assert parse_lsn(str(value)) == value


def test_the_metadata_keeps_the_engine_map_whole() -> None:
    offset = {"lsn_commit": 100, "lsn": 100, "txId": 7, "ts_usec": 1, "messageType": "COMMIT"}
    metadata = metadata_of({"server": "shop"}, offset, 101)
    assert json.loads(metadata) == {"partition": {"server": "shop"}, "offset": offset, "next": 101}
    assert position_of(metadata) == offset
    assert position_of("") is None  # a reset clears the metadata
    assert position_of("not json") is None


def test_the_engine_properties_point_at_the_store() -> None:
    props = engine_properties(
        "orders-cdc",
        "postgresql+psycopg://cdc:secret@db.example:6543/offsetstore",
        {
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "provide.transaction.metadata": "false",
        },
    )
    assert props["offset.storage"] == "offsetstore.connect.OffsetStoreBackingStore"
    assert props["offset.storage.offsetstore.url"] == "jdbc:postgresql://db.example:6543/offsetstore"
    assert (props["offset.storage.offsetstore.user"], props["offset.storage.offsetstore.password"]) == ("cdc", "secret")
    assert props["offset.storage.offsetstore.group"] == "orders-cdc" == props["name"]
    assert props["provide.transaction.metadata"] == "true"  # the handler needs END events
    # The slot never runs ahead of the store: no refusal to start over its restart LSN (tests/connect/test_kill.py).
    assert props["offset.mismatch.strategy"] == "trust_slot"


def test_jdbc_url_of_a_multi_host_url() -> None:
    url, props = jdbc_url("postgresql://u@h1:5432,h2:5433/db?target_session_attrs=read-write")
    assert url == "jdbc:postgresql://h1:5432,h2:5433/db"
    assert props == {"user": "u"}
