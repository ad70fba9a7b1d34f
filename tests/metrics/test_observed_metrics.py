"""/metrics marks an observed group (issue 57): offsetstore_group_observed{group, source}, its lag like any group's."""

from __future__ import annotations

from prometheus_client import generate_latest

from offsetstore.client import Watermark
from tests.fixtures.fix_metrics import Metered


def test_an_observed_group_has_its_series_and_the_observed_mark(metered: Metered, group_id: str, topic: str) -> None:
    client = metered.client
    client.observe_offsets(group_id, {(topic, 0): 40}, source="kafka:local/legacy")
    client.commit_offsets(f"{group_id}-c", {(topic, 0): 40})
    client.report_watermarks([Watermark(topic, 0, 0, 100)])
    generate_latest(metered.registry)
    labels = {"group": group_id, "topic": topic, "partition": "0"}
    assert metered.value("offsetstore_group_lag", **labels) == 60
    assert metered.value("offsetstore_group_observed", group=group_id, source="kafka:local/legacy") == 1
    families = {f.name: f for f in metered.registry.collect()}
    # Its verdict too, as any group's (one series, whichever the verdict).
    assert [s.value for s in families["offsetstore_group_status"].samples if s.labels["group"] == group_id] == [1]
    observed = [s.labels["group"] for s in families["offsetstore_group_observed"].samples]
    assert group_id in observed and f"{group_id}-c" not in observed
