"""The console shows each group's Kafka cluster (issue 58): in the groups list and on the group's page, a switch's too."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import pytest

from offsetstore import storage
from offsetstore.core.types import OffsetCommit
from offsetstore.storage.clusters import bind_cluster
from tests.fixtures.fix_console import open_group, sign_in, wait

if TYPE_CHECKING:
    from tests.fixtures.fix_http import HttpServer

pytestmark = pytest.mark.slow


def test_a_groups_cluster_shows_in_the_list_and_on_its_page_and_follows_a_switch(
    browser: Any, http_server: HttpServer, engine: Any
) -> None:
    from selenium.webdriver.common.by import By

    prefix = f"console-cluster-{uuid.uuid4().hex[:6]}-"
    bound, unbound = prefix + "on-a", prefix + "plain"
    with engine.begin() as conn:  # what the Kafka recipe's writer does in its join and commit transactions
        generation = storage.join_group(conn, bound)
        bind_cluster(conn, bound, "cluster-A")
        storage.commit_offsets(conn, bound, [OffsetCommit("orders", 0, 42)], generation=generation)
    offsets = [{"topic": "orders", "partition": 0, "offset": "7"}]
    assert http_server.curl("CommitOffsets", {"groupId": unbound, "offsets": offsets})[0] == 200

    sign_in(browser, http_server, "admin")
    browser.get(f"{http_server.url}/#/?prefix={prefix}")

    def clusters(d: Any) -> dict[str, str]:  # the column before the status
        rows = d.find_elements(By.CSS_SELECTOR, "#groups-table tbody tr")
        return {
            r.find_element(By.CSS_SELECTOR, "a.group-link").text: r.find_elements(By.TAG_NAME, "td")[-2].text
            for r in rows
        }

    wait(browser, lambda d: clusters(d) == {bound: "cluster-A", unbound: "none"})
    open_group(browser, bound, admin="yes")
    assert browser.find_element(By.ID, "kafka-cluster").text == "cluster-A"

    body = {
        "groupId": bound,
        "topics": [{"topic": "A.orders", "partitions": [0]}],
        "toOffsets": {"offsets": [{"topic": "A.orders", "partition": 0, "offset": "40"}]},
        "switchToClusterId": "cluster-B",
        "expectedGeneration": str(generation),
    }
    status, switched = http_server.curl("ResetOffsets", body)
    assert status == 200, switched
    browser.refresh()
    wait(browser, lambda d: d.find_element(By.ID, "kafka-cluster").text == "cluster-B")
    # The switch in the timeline.
    wait(
        browser,
        lambda d: any(
            "switch" in li.text and "→ 40" in li.text for li in d.find_elements(By.CSS_SELECTOR, "#timeline li")
        ),
    )

    browser.get(f"{http_server.url}/#/?prefix={prefix}")
    wait(browser, lambda d: clusters(d) == {bound: "cluster-B", unbound: "none"})
