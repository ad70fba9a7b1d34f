"""The Prometheus metrics: exact values from a registry of the test's own, and over HTTP."""

from __future__ import annotations

import socket
import time

import grpc
import pytest
import sqlalchemy as sa
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from offsetstore import storage
from offsetstore.core.errors import GroupNotFoundError, InvalidArgumentError, OffsetMismatchError, StaleGenerationError
from offsetstore.core.types import Boundary, OffsetCommit, Watermark
from offsetstore.runtime import migrate
from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store
from offsetstore.server import metrics
from offsetstore.storage import schema
from offsetstore.storage.engine import SessionSettings
from tests.fixtures.fix_metrics import (
    METHODS,
    SERVICE,
    Metered,
    count_statements,
)
from tests.fixtures.storage import engine_of

# --- gRPC metrics ---------------------------------------------------------------------


def test_every_method_has_zero_series_before_any_call(metered: Metered) -> None:
    for method in METHODS:
        assert metered.rpc("grpc_server_started_total", method) == 0, method
        for code in metrics.GRPC_CODES.values():
            assert metered.handled(method, code) == 0, (method, code)
        assert metered.rpc("grpc_server_handling_seconds_count", method) == 0, method
        assert metered.rpc("grpc_server_handling_seconds_bucket", method, le="+Inf") == 0, method
    health = {"grpc_service": "grpc.health.v1.Health"}
    assert metered.value("grpc_server_started_total", grpc_type="unary", grpc_method="Check", **health) == 0
    assert metered.value("grpc_server_started_total", grpc_type="server_stream", grpc_method="Watch", **health) == 0
    assert (
        metered.value(
            "grpc_server_started_total",
            grpc_type="bidi_stream",
            grpc_service="grpc.reflection.v1alpha.ServerReflection",
            grpc_method="ServerReflectionInfo",
        )
        == 0
    )
    for reason in ("STALE_GENERATION", "OFFSET_MISMATCH", "INVALID_ARGUMENT"):
        assert metered.value("offsetstore_commit_rejections_total", reason=reason) == 0
    for name in ("offsetstore_commits_total", "offsetstore_offsets_committed_total", "offsetstore_resets_total"):
        assert metered.value(name) == 0, name
    for operation in ("commit_offsets", "reset_offsets", "fetch_offsets", "group_metrics"):
        assert metered.value("offsetstore_database_query_seconds_count", operation=operation) == 0
    for batch in ("write", "read"):
        assert metered.value("offsetstore_database_batch_calls_count", batch=batch) == 0
    # Go's spelling of the codes, which existing dashboards match on.
    assert metered.handled("CommitOffsets", "Canceled") == 0
    assert metered.handled("CommitOffsets", "CANCELLED") is None


def test_commits_rejections_and_resets_are_counted_exactly(metered: Metered, group_id: str, topic: str) -> None:
    c = metered.client
    c.commit_offsets(group_id, {(topic, 0): 10, (topic, 1): 20})
    c.commit_offsets(group_id, {(topic, 0): 11})
    generation = c.join_group(group_id)
    c.commit_offsets(group_id, {(topic, 2): 5}, generation=generation)
    with pytest.raises(StaleGenerationError):
        c.commit_offsets(group_id, {(topic, 0): 12}, generation=generation + 7)
    with pytest.raises(OffsetMismatchError):
        c.commit_offsets(group_id, [OffsetCommit(topic, 0, 12, expected_offset=3)])
    with pytest.raises(InvalidArgumentError):
        c.commit_offsets(group_id, {(topic, -1): 1})
    with pytest.raises(InvalidArgumentError):
        c.commit_offsets(group_id, {("bad topic!", 0): 1})
    c.reset_offsets(group_id, topics=[topic], to_offset=0, dry_run=True)
    c.reset_offsets(group_id, topics=[topic], to_offset=0)
    with pytest.raises(InvalidArgumentError):
        c.reset_offsets(group_id, topics=[topic])  # no target
    with pytest.raises(GroupNotFoundError):
        c.describe_group(f"{group_id}-unknown")

    assert metered.value("offsetstore_commits_total") == 3
    assert metered.value("offsetstore_offsets_committed_total") == 4
    assert metered.value("offsetstore_commit_rejections_total", reason="STALE_GENERATION") == 1
    assert metered.value("offsetstore_commit_rejections_total", reason="OFFSET_MISMATCH") == 1
    assert metered.value("offsetstore_commit_rejections_total", reason="INVALID_ARGUMENT") == 2
    assert metered.value("offsetstore_resets_total") == 1

    assert metered.rpc("grpc_server_started_total", "CommitOffsets") == 7
    assert metered.handled("CommitOffsets", "OK") == 3
    assert metered.handled("CommitOffsets", "FailedPrecondition") == 1
    assert metered.handled("CommitOffsets", "Aborted") == 1
    assert metered.handled("CommitOffsets", "InvalidArgument") == 2
    assert metered.rpc("grpc_server_handling_seconds_count", "CommitOffsets") == 7
    assert metered.rpc("grpc_server_started_total", "ResetOffsets") == 3
    assert metered.handled("ResetOffsets", "OK") == 2
    assert metered.handled("ResetOffsets", "InvalidArgument") == 1
    assert metered.handled("JoinGroup", "OK") == 1
    assert metered.handled("DescribeGroup", "NotFound") == 1
    assert metered.handled("FetchOffsets", "OK") == 0
    handled = sum(metered.handled(m, code) or 0 for m in METHODS for code in metrics.GRPC_CODES.values())
    assert handled == 12

    # Every call that reached the store was timed, failures included.
    assert metered.value("offsetstore_database_query_seconds_count", operation="commit_offsets") == 7
    assert metered.value("offsetstore_database_query_seconds_count", operation="reset_offsets") == 3
    assert metered.value("offsetstore_database_query_seconds_count", operation="join_group") == 1
    assert metered.value("offsetstore_database_query_seconds_sum", operation="commit_offsets") > 0


def test_a_status_set_without_raising_is_recorded(metered: Metered) -> None:
    # Health's Check answers an unknown service with set_code(NOT_FOUND) and a normal return.
    with grpc.insecure_channel(metered.server.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        assert stub.Check(health_pb2.HealthCheckRequest(), timeout=10).status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as error:
            stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10)
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    labels = {"grpc_type": "unary", "grpc_service": "grpc.health.v1.Health", "grpc_method": "Check"}
    assert metered.value("grpc_server_handled_total", grpc_code="OK", **labels) == 1
    # grpc.aio sends an abort's status before the handler's interceptors see the call end
    # (health's Check aborts; offsetstore's own calls set their status and return).
    stop_at = time.monotonic() + 10
    while metered.value("grpc_server_handled_total", grpc_code="NotFound", **labels) == 0:
        assert time.monotonic() < stop_at
        time.sleep(0.01)
    assert metered.value("grpc_server_handled_total", grpc_code="NotFound", **labels) == 1
    assert metered.value("grpc_server_started_total", **labels) == 2


def test_streaming_calls_are_recorded_when_they_end(metered: Metered) -> None:
    with grpc.insecure_channel(metered.server.address) as channel:
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        answers = list(
            reflection.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
            )
        )
        assert SERVICE in {s.name for s in answers[0].list_services_response.service}
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=10)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()

    bidi = {
        "grpc_type": "bidi_stream",
        "grpc_service": "grpc.reflection.v1alpha.ServerReflection",
        "grpc_method": "ServerReflectionInfo",
    }
    assert metered.value("grpc_server_started_total", **bidi) == 1
    assert metered.value("grpc_server_handled_total", grpc_code="OK", **bidi) == 1
    assert metered.value("grpc_server_handling_seconds_count", **bidi) == 1
    watch_labels = {"grpc_type": "server_stream", "grpc_service": "grpc.health.v1.Health", "grpc_method": "Watch"}
    assert metered.value("grpc_server_started_total", **watch_labels) == 1
    # The server learns of the cancellation asynchronously.
    deadline = time.monotonic() + 10
    while metered.value("grpc_server_handled_total", grpc_code="Canceled", **watch_labels) != 1:
        assert time.monotonic() < deadline, "the cancelled Watch was never recorded as Canceled"
        time.sleep(0.05)
    assert metered.value("grpc_server_handled_total", grpc_code="OK", **watch_labels) == 0


# --- per-group series from the database --------------------------------------------


def test_a_direct_commit_through_the_storage_core_shows_in_group_series(
    metered: Metered, metrics_engine: sa.Engine, group_id: str, topic: str
) -> None:
    engine = metrics_engine
    with engine.begin() as conn:
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 42), OffsetCommit(topic, 3, 7)])
    generate_latest(metered.registry)  # a scrape reads the database; nothing is cached
    labels = {"group": group_id, "topic": topic}
    assert metered.value("offsetstore_group_offset", partition="0", **labels) == 42
    assert metered.value("offsetstore_group_offset", partition="3", **labels) == 7
    assert metered.value("offsetstore_group_offset", partition="1", **labels) is None
    # No log end reported yet: no lag, rather than a made-up one.
    assert metered.value("offsetstore_group_lag", partition="0", **labels) is None
    assert metered.value("offsetstore_group_max_lag", group=group_id) is None
    age = metered.value("offsetstore_group_last_commit_age_seconds", group=group_id)
    assert age is not None and 0 <= age < 60
    assert metered.value("offsetstore_database_up") == 1
    # The server did not see that commit: its counters stay at zero.
    assert metered.value("offsetstore_commits_total") == 0

    with engine.begin() as conn:
        storage.report_watermarks(conn, [Watermark(topic, 0, 0, 50), Watermark(topic, 3, 0, 107)])
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 45)])
    assert metered.value("offsetstore_group_offset", partition="0", **labels) == 45
    assert metered.value("offsetstore_group_lag", partition="0", **labels) == 5
    assert metered.value("offsetstore_group_lag", partition="3", **labels) == 100
    assert metered.value("offsetstore_group_max_lag", group=group_id) == 100


def test_lag_resolves_sentinels_and_age_is_the_newest_commit(
    metered: Metered, metrics_engine: sa.Engine, group_id: str, topic: str
) -> None:
    engine = metrics_engine
    c = metered.client
    c.commit_offsets(group_id, {(topic, 0): 5, (topic, 1): 9})
    c.report_watermarks([Watermark(topic, 0, 2, 30)])
    # No watermark for partition 1: resetting it to the earliest stores the sentinel -2.
    c.reset_offsets(group_id, topics={topic: [1]}, to_boundary=Boundary.EARLIEST)
    labels = {"group": group_id, "topic": topic}
    assert metered.value("offsetstore_group_offset", partition="1", **labels) == -2
    assert metered.value("offsetstore_group_lag", partition="1", **labels) is None
    c.report_watermarks([Watermark(topic, 1, 4, 10)])
    assert metered.value("offsetstore_group_lag", partition="1", **labels) == 6  # 10 - earliest 4
    assert metered.value("offsetstore_group_lag", partition="0", **labels) == 25
    assert metered.value("offsetstore_group_max_lag", group=group_id) == 25

    offsets = schema.offsets
    with engine.begin() as conn:
        for partition, hours in ((0, 1), (1, 2)):  # the newest is not the last row written
            conn.execute(
                sa.update(offsets)
                .where(offsets.c.group_id == group_id, offsets.c.partition == partition)
                .values(commit_time=sa.func.now() - sa.literal_column(f"interval '{hours} hours'"))
            )
    age = metered.value("offsetstore_group_last_commit_age_seconds", group=group_id)
    assert age is not None and 3600 <= age < 3660


def test_the_group_cap_and_two_statements_per_scrape(scratch_database_url: str) -> None:
    migrate.upgrade(scratch_database_url)
    store = Store.open(StoreConfig(scratch_database_url, hot_pool_size=2))
    try:
        with engine_of(store).begin() as conn:
            for group, offset in (("b", 2), ("a", 1), ("c", 3)):
                storage.commit_offsets(
                    conn, group, [OffsetCommit("orders", 0, offset), OffsetCommit("orders", 1, offset)]
                )
            storage.join_group(conn, "d-joined-only")  # a group, but without offsets
        registry = metrics.build_registry(store, group_limit=2)
        generate_latest(registry)  # the first connection runs the dialect's own setup queries
        # The groups and their sizes, then the partitions of those that fit (issue 22).
        assert count_statements(store, registry) == 2

        value = registry.get_sample_value
        assert value("offsetstore_groups") == 4
        assert value("offsetstore_groups_omitted") == 1  # c; d has no offsets, so no series to miss
        for group, offset in (("a", 1), ("b", 2)):  # the first two by id
            for partition in ("0", "1"):
                assert (
                    value("offsetstore_group_offset", {"group": group, "topic": "orders", "partition": partition})
                    == offset
                )
            assert value("offsetstore_group_last_commit_age_seconds", {"group": group}) is not None
        assert value("offsetstore_group_offset", {"group": "c", "topic": "orders", "partition": "0"}) is None
        assert value("offsetstore_group_last_commit_age_seconds", {"group": "c"}) is None
        assert value("offsetstore_database_up") == 1

        nothing = metrics.build_registry(store, group_limit=0)
        assert count_statements(store, nothing) == 1  # no group shown: no partitions to read
        assert nothing.get_sample_value("offsetstore_groups_omitted") == 3
        assert nothing.get_sample_value("offsetstore_groups") == 4
        assert (
            nothing.get_sample_value("offsetstore_group_offset", {"group": "a", "topic": "orders", "partition": "0"})
            is None
        )
        everything = metrics.build_registry(store, group_limit=4)
        assert everything.get_sample_value("offsetstore_groups_omitted") == 0
        assert (
            everything.get_sample_value("offsetstore_group_offset", {"group": "c", "topic": "orders", "partition": "1"})
            == 3
        )
        # A group without offsets has no series to show.
        assert (
            everything.get_sample_value("offsetstore_group_last_commit_age_seconds", {"group": "d-joined-only"}) is None
        )
    finally:
        store.dispose()


def test_thousands_of_groups_are_still_two_fast_statements(scratch_database_url: str) -> None:
    migrate.upgrade(scratch_database_url)
    store = Store.open(StoreConfig(scratch_database_url, hot_pool_size=2))
    try:
        with engine_of(store).begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO offsetstore.groups (group_id) SELECT format('g%s', lpad(i::text, 5, '0')) FROM generate_series(1, 3000) i"
                )
            )
            conn.execute(
                sa.text(
                    'INSERT INTO offsetstore.offsets (group_id, topic, partition, "offset") '
                    "SELECT group_id, 'orders', p, 100 FROM offsetstore.groups, generate_series(0, 3) p"
                )
            )
            conn.execute(
                sa.text("INSERT INTO offsetstore.watermarks VALUES ('orders', 0, 0, 150), ('orders', 3, 0, 130)")
            )
        registry = metrics.build_registry(store, group_limit=1000)
        generate_latest(registry)
        started = time.perf_counter()
        assert count_statements(store, registry) == 2
        elapsed = time.perf_counter() - started
        assert elapsed < 5, f"a scrape of 1000 groups took {elapsed:.2f}s"
        families = {f.name: f for f in registry.collect()}
        assert len(families["offsetstore_group_offset"].samples) == 4000
        assert len(families["offsetstore_group_lag"].samples) == 2000
        assert {s.value for s in families["offsetstore_group_max_lag"].samples} == {50}
        assert registry.get_sample_value("offsetstore_groups_omitted") == 2000
        assert (
            registry.get_sample_value(
                "offsetstore_group_offset", {"group": "g01000", "topic": "orders", "partition": "3"}
            )
            == 100
        )
        assert (
            registry.get_sample_value(
                "offsetstore_group_offset", {"group": "g01001", "topic": "orders", "partition": "3"}
            )
            is None
        )
    finally:
        store.dispose()


def test_a_scrape_with_the_database_down_reports_it_and_does_not_fail() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    series = metrics.StoreSeries()
    store = Store.open(
        StoreConfig(
            f"postgresql://postgres@127.0.0.1:{port}/none",
            SessionSettings(connect_timeout_s=2),
            observer=series.observer,
        )
    )
    try:
        registry = metrics.build_registry(store, series=series)
        text = generate_latest(registry).decode()  # one scrape, read as Prometheus would
        samples = {s.name: s for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}
        assert samples["offsetstore_database_up"].value == 0
        assert "offsetstore_group_offset{" not in text
        assert "offsetstore_groups_omitted" not in samples
        # The failed query was timed; the next scrape shows it (histograms come first).
        assert (
            'offsetstore_database_query_seconds_count{operation="group_metrics"} 1.0'
            in generate_latest(registry).decode()
        )
        assert samples["offsetstore_commits_total"].value == 0  # the rest is still served
    finally:
        store.dispose()


def test_a_scrape_that_times_out_keeps_the_database_up(metrics_database_url: str, metrics_engine: sa.Engine) -> None:
    store = Store.open(StoreConfig(metrics_database_url, SessionSettings(statement_timeout_ms=200), hot_pool_size=2))
    try:
        registry = metrics.build_registry(store)
        assert registry.get_sample_value("offsetstore_database_up") == 1
        with metrics_engine.begin() as conn:
            conn.execute(sa.text("LOCK TABLE offsetstore.offsets IN ACCESS EXCLUSIVE MODE"))
            text = generate_latest(registry).decode()  # waits for the lock until the statement timeout
        samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}
        # The database answered (it cancelled the query): it is up, the group series are missing.
        assert samples["offsetstore_database_up"] == 1
        assert "offsetstore_groups" not in samples
        assert "offsetstore_group_offset{" not in text
    finally:
        store.dispose()


def test_each_registry_times_the_store_made_with_its_hooks(metrics_database_url: str, group_id: str) -> None:
    # The hooks are given when a store is made (StoreConfig.observer), never patched in after:
    # two stores, each with its registry's series, time their operations into their own alone.
    first_series, second_series = metrics.StoreSeries(), metrics.StoreSeries()
    first = Store.open(StoreConfig(metrics_database_url, hot_pool_size=2, observer=first_series.observer))
    second = Store.open(StoreConfig(metrics_database_url, hot_pool_size=2, observer=second_series.observer))
    try:
        first_registry = metrics.build_registry(first, series=first_series)
        second_registry = metrics.build_registry(second, series=second_series)
        second.join_group(group_id)
        count = {"operation": "join_group"}
        assert second_registry.get_sample_value("offsetstore_database_query_seconds_count", count) == 1
        assert first_registry.get_sample_value("offsetstore_database_query_seconds_count", count) == 0
    finally:
        second.dispose()
        first.dispose()
