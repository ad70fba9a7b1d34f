"""/metrics as Prometheus sees it: over HTTP, the shipped dashboard and alerts, and the series budget."""

from __future__ import annotations

import contextvars
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.pool import NullPool

from offsetstore.core.types import Watermark
from offsetstore.runtime import maintenance, migrate
from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store
from offsetstore.server import metrics
from tests.fixtures.fix_metrics import (
    ROOT,
    SERVICE,
    Metered,
)

# --- over HTTP ---------------------------------------------------------------------------


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = s.name + "{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}"
            samples[key] = s.value
    return samples


def test_metrics_over_http(metered: Metered, group_id: str, topic: str) -> None:
    metered.client.commit_offsets(group_id, {(topic, 0): 10, (topic, 1): 20})
    metered.client.report_watermarks([Watermark(topic, 0, 0, 15)])
    http = metrics.serve_http(metered.registry, "127.0.0.1:0")
    try:
        assert http.port > 0
        samples = scrape(http.url)
    finally:
        http.shutdown()
    handled = (
        f"grpc_server_handled_total{{grpc_code=OK,grpc_method=CommitOffsets,grpc_service={SERVICE},grpc_type=unary}}"
    )
    assert samples[handled] == 1
    assert samples["offsetstore_commits_total{}"] == 1
    assert samples["offsetstore_offsets_committed_total{}"] == 2
    assert samples[f"offsetstore_group_offset{{group={group_id},partition=0,topic={topic}}}"] == 10
    assert samples[f"offsetstore_group_offset{{group={group_id},partition=1,topic={topic}}}"] == 20
    assert samples[f"offsetstore_group_lag{{group={group_id},partition=0,topic={topic}}}"] == 5
    assert f"offsetstore_group_lag{{group={group_id},partition=1,topic={topic}}}" not in samples
    assert samples[f"offsetstore_group_max_lag{{group={group_id}}}"] == 5
    assert samples["offsetstore_database_up{}"] == 1
    # shutdown() closes the socket: nothing answers there any more.
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(http.url, timeout=5)


# --- the shipped dashboard and alert rules -----------------------------------------------

_PROMQL_NAME = re.compile(r"\b((?:grpc_server|offsetstore)_[a-z_]+)\b")


def metric_names(promql: str) -> set[str]:
    """Metric names in an expression: label matchers and by/without clauses hold only label names."""
    promql = re.sub(r"\{[^}]*\}", "", promql)
    promql = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", promql)
    return set(_PROMQL_NAME.findall(promql))


def panels(dashboard: dict) -> Iterator[dict]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


@pytest.fixture
def exposed(metered: Metered, group_id: str, topic: str) -> set[str]:
    """Every sample name a server with one group with a known lag exposes."""
    metered.client.commit_offsets(group_id, {(topic, 0): 1})
    metered.client.report_watermarks([Watermark(topic, 0, 0, 3)])
    text = generate_latest(metered.registry).decode()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_dashboard_queries_only_exposed_metrics(exposed: set[str]) -> None:
    dashboard = json.loads((ROOT / "deploy/grafana/offsetstore-dashboard.json").read_text())
    assert any(v["type"] == "datasource" and v["query"] == "prometheus" for v in dashboard["templating"]["list"])
    used: set[str] = set()
    titles = set()
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        titles.add(panel["title"])
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, (panel["title"], target["expr"])
            assert names <= exposed, (panel["title"], names - exposed)
            used |= names
    for name in (
        "grpc_server_handled_total",
        "grpc_server_handling_seconds_bucket",
        "offsetstore_group_lag",
        "offsetstore_group_last_commit_age_seconds",
        "offsetstore_database_up",
    ):
        assert name in used, name
    assert len(titles) >= 6
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            names = metric_names(variable["query"]["query"])
            assert names and names <= exposed, (variable["name"], names - exposed)


def test_the_alert_rules_query_only_exposed_metrics(exposed: set[str]) -> None:
    text = (ROOT / "deploy/prometheus/alerts.yml").read_text()
    alerts = re.findall(r"^\s*- alert: (\w+)$", text, re.MULTILINE)
    assert set(alerts) >= {
        "OffsetStoreConsumerLagGrowing",
        "OffsetStoreGroupNotCommitting",
        "OffsetStoreDatabaseDown",
        "OffsetStoreHighErrorRate",
    }
    exprs = re.findall(r"^\s*expr: (.+)$", text, re.MULTILINE)
    assert len(exprs) == len(alerts)
    for expr in exprs:
        # `up` is Prometheus' own series of a scrape target.
        names = metric_names(expr) | ({"up"} if re.match(r"up\{", expr) else set())
        assert names and names <= exposed | {"up"}, (expr, names - exposed)


# --- issue 22: /metrics is bounded by series, not groups ----------------------------------------

GROUP_FAMILIES = (
    "offsetstore_group_offset",
    "offsetstore_group_lag",
    "offsetstore_group_offset_past_log_end",
    "offsetstore_group_partitions",
    "offsetstore_group_lag_sum",
    "offsetstore_group_max_lag",
    "offsetstore_group_partitions_past_log_end",
    "offsetstore_group_last_commit_age_seconds",
    "offsetstore_group_status",
)


def fill_huge_and_small(url: str, huge: int) -> None:
    """``huge-0``: ``huge`` partitions at lag 15, one past the log end; a-1..a-3, b-1: 4 partitions each at lag 5."""
    engine = sa.create_engine(url, poolclass=NullPool)
    statements = (
        "INSERT INTO offsetstore.groups (group_id) VALUES ('huge-0'), ('a-1'), ('a-2'), ('a-3'), ('b-1')",
        'INSERT INTO offsetstore.offsets (group_id, topic, partition, "offset") '
        "SELECT 'huge-0', 'wide', p, CASE WHEN p = 0 THEN 30 ELSE 10 END FROM generate_series(0, :n - 1) p",
        # Seen after the commits (a past-end offset is an anomaly only then: issue 36).
        "INSERT INTO offsetstore.watermarks (topic, partition, log_start_offset, log_end_offset, updated_at) "
        "SELECT 'wide', p, 0, 25, statement_timestamp() FROM generate_series(0, :n - 1) p",
        'INSERT INTO offsetstore.offsets (group_id, topic, partition, "offset") '
        "SELECT g, 'narrow', p, 20 FROM unnest(ARRAY['a-1', 'a-2', 'a-3', 'b-1']) g, generate_series(0, 3) p",
        "INSERT INTO offsetstore.watermarks (topic, partition, log_start_offset, log_end_offset) "
        "SELECT 'narrow', p, 0, 25 FROM generate_series(0, 3) p",
    )
    with engine.begin() as conn:
        for statement in statements:
            conn.execute(sa.text(statement), {"n": huge})
    engine.dispose()


def group_series(samples: dict[str, float]) -> int:
    return sum(1 for key in samples if key.split("{")[0] in GROUP_FAMILIES)


def test_one_huge_group_shows_its_sums_and_every_other_group_keeps_its_partitions(scratch_database_url: str) -> None:
    migrate.upgrade(scratch_database_url)
    fill_huge_and_small(scratch_database_url, 5000)
    store = Store.open(StoreConfig(scratch_database_url, hot_pool_size=2))
    http = None
    try:
        registry = metrics.build_registry(store, series_limit=1000)
        http = metrics.serve_http(registry, "127.0.0.1:0")
        samples = scrape(http.url)  # a real scrape over HTTP
        assert group_series(samples) <= 1000
        # The huge group did not fit its tenant's share: it is shown by its sums.
        assert "offsetstore_group_offset{group=huge-0,partition=1,topic=wide}" not in samples
        assert samples["offsetstore_group_partitions{group=huge-0}"] == 5000
        assert samples["offsetstore_group_lag_sum{group=huge-0}"] == 15 * 4999
        assert samples["offsetstore_group_max_lag{group=huge-0}"] == 15
        assert samples["offsetstore_group_partitions_past_log_end{group=huge-0}"] == 1
        assert "offsetstore_group_last_commit_age_seconds{group=huge-0}" in samples
        assert samples["offsetstore_groups_summarized{}"] == 1
        # No status for it until the maintenance has kept its verdict (one partition past its log end).
        assert not any(key.startswith("offsetstore_group_status{group=huge-0,") for key in samples)
        assert store.wait(maintenance.Maintenance(store.aio, history_retention=0, offsets_retention=0).run_once())
        kept = metrics.build_registry(store, series_limit=1000)
        assert kept.get_sample_value("offsetstore_group_status", {"group": "huge-0", "status": "PAST_END"}) == 1
        # Every other group keeps its per-partition series, and its sums too.
        for group in ("a-1", "a-2", "a-3", "b-1"):
            for partition in range(4):
                assert samples[f"offsetstore_group_offset{{group={group},partition={partition},topic=narrow}}"] == 20
                assert samples[f"offsetstore_group_lag{{group={group},partition={partition},topic=narrow}}"] == 5
            assert samples[f"offsetstore_group_partitions{{group={group}}}"] == 4
            assert samples[f"offsetstore_group_lag_sum{{group={group}}}"] == 20
            assert samples[f"offsetstore_group_max_lag{{group={group}}}"] == 5
        # Without a series limit, the huge group's partitions are all there (as before).
        unbounded = metrics.build_registry(store, series_limit=0)
        assert (
            unbounded.get_sample_value(
                "offsetstore_group_offset", {"group": "huge-0", "topic": "wide", "partition": "4999"}
            )
            == 10
        )
        assert unbounded.get_sample_value("offsetstore_group_lag_sum", {"group": "huge-0"}) == 15 * 4999
    finally:
        if http is not None:
            http.shutdown()
        store.dispose()


def test_the_series_budget_is_shared_fairly_between_tenants() -> None:
    # Tenant a: ten groups of 40 partitions (80 series each); b: one of 300 (600); c: one of 10.
    sizes = [(f"a-{i}", "a", 40) for i in range(10)] + [("b-0", "b", 300), ("c-0", "c", 10)]
    # 1000 series: c needs 20, a and b get (1000 - 20) / 2 = 490 each; b's group does not fit
    # its share, a takes six of its groups; b's unused share is offered again, to a.
    chosen = metrics.share_series(sizes, 1000)
    assert "c-0" in chosen and "b-0" not in chosen
    assert sum(1 for g in chosen if g.startswith("a-")) == 10  # 800 of what b could not use
    # With 1300 series b's group fits its share (640 each once c took 20).
    assert "b-0" in metrics.share_series(sizes, 1300)
    # One tenant's thousand tiny groups cannot take another's share.
    flood = [(f"t-{i:04}", "t", 1) for i in range(1000)] + [("v-0", "v", 100)]
    assert "v-0" in metrics.share_series(flood, 400)


def test_serve_reads_the_sums_of_huge_groups_in_the_background(scratch_database_url: str) -> None:
    migrate.upgrade(scratch_database_url)
    fill_huge_and_small(scratch_database_url, 3000)
    store = Store.open(StoreConfig(scratch_database_url, hot_pool_size=2))
    try:
        registry = metrics.build_registry(store, series_limit=500, sums_seconds=60)
        summed_here: list[list[str]] = []  # the groups whose sums the scrape's own call read
        # The store runs every statement on its loop, in its caller's context: this marks the scrape's.
        scraping = contextvars.ContextVar("scraping", default=False)

        def on_execute(conn, cursor, statement, parameters, context, executemany):
            if scraping.get() and isinstance(parameters, dict):
                summed_here.append(parameters.get("summarized") or [])

        sa.event.listen(store.aio.engine.sync_engine, "before_cursor_execute", on_execute)
        token = scraping.set(True)
        generate_latest(registry)  # starts the read of the sums; this scrape does not wait for it
        scraping.reset(token)
        sa.event.remove(store.aio.engine.sync_engine, "before_cursor_execute", on_execute)
        assert summed_here and not any(summed_here)
        assert registry.get_sample_value("offsetstore_group_partitions", {"group": "huge-0"}) == 3000
        stop_at = time.monotonic() + 30  # generous: the thread's query takes milliseconds
        while registry.get_sample_value("offsetstore_group_lag_sum", {"group": "huge-0"}) is None:
            assert time.monotonic() < stop_at, "the background sums never came"
            time.sleep(0.1)
        assert registry.get_sample_value("offsetstore_group_lag_sum", {"group": "huge-0"}) == 15 * 2999
        assert registry.get_sample_value("offsetstore_group_max_lag", {"group": "huge-0"}) == 15
        assert registry.get_sample_value("offsetstore_group_lag_sum", {"group": "a-1"}) == 20
    finally:
        store.dispose()
