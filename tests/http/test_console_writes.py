"""The console's writes in a real browser: a confirm bound to its preview, per-partition reset, delete."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import pytest

from tests.fixtures.fix_console import click, open_group, shown_offsets, sign_in, wait

if TYPE_CHECKING:
    from tests.fixtures.fix_http import HttpServer

pytestmark = pytest.mark.slow


def _group(http_server: HttpServer, partitions: int = 3) -> str:
    """A fresh group with offsets 10, 20, 30... on topic orders, at generation 0."""
    group = f"console-w-{uuid.uuid4().hex[:8]}"
    offsets = [{"topic": "orders", "partition": p, "offset": str(10 * (p + 1))} for p in range(partitions)]
    assert http_server.curl("CommitOffsets", {"groupId": group, "offsets": offsets})[0] == 200
    return group


def _stored(http_server: HttpServer, group: str) -> dict[int, str]:
    answer = http_server.curl("FetchOffsets", {"groupId": group})[1]
    return {int(o.get("partition", 0)): o["offset"] for o in answer.get("offsets", [])}


def _open(browser: Any, http_server: HttpServer, group: str) -> None:
    sign_in(browser, http_server, "admin")
    browser.get(f"{http_server.url}/#/?prefix={group}")
    open_group(browser, group, admin="yes")


def _preview_rows(browser: Any) -> list[list[str]]:
    from selenium.webdriver.common.by import By

    return [
        [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        for tr in browser.find_elements(By.CSS_SELECTOR, "#preview-table tbody tr")
    ]


def _tick_only(browser: Any, box_id: str, keep: set[int]) -> None:
    from selenium.webdriver.common.by import By

    boxes = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f"#{box_id} input[type=checkbox]"))
    for box in boxes:
        if (int(box.get_attribute("value")) in keep) != box.is_selected():
            box.click()


def test_a_confirm_after_another_writer_moved_the_group_is_refused_and_shows_a_fresh_preview(
    browser: Any, http_server: HttpServer
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    group = _group(http_server)
    _open(browser, http_server, group)
    Select(browser.find_element(By.ID, "reset-target")).select_by_value("toOffset")
    browser.find_element(By.ID, "reset-value").send_keys("5")
    click(browser, "#reset-preview")
    wait(browser, lambda d: d.find_element(By.ID, "fence").text.startswith("Generation 0 → 1:"))

    # Another writer joins and commits after the preview: the group is at generation 1.
    joined = http_server.curl("JoinGroup", {"groupId": group, "memberId": "another"})[1]["generation"]
    moved = [{"topic": "orders", "partition": 0, "offset": "70"}]
    assert http_server.curl("CommitOffsets", {"groupId": group, "generation": joined, "offsets": moved})[0] == 200
    history_before = http_server.curl("ListOffsetHistory", {"groupId": group})[1]

    click(browser, "#reset-confirm")
    stale = wait(browser, lambda d: d.find_element(By.ID, "reset-stale"))
    assert "moved from generation 0 to 1" in stale.text and "nothing changed" in stale.text
    # Nothing was reset: the other writer's offset and generation stand, the history is as it was.
    assert _stored(http_server, group) == {0: "70", 1: "20", 2: "30"}
    assert http_server.curl("FetchOffsets", {"groupId": group})[1]["generation"] == "1"
    assert http_server.curl("ListOffsetHistory", {"groupId": group})[1] == history_before
    # The fresh preview shows the group as it is now, and a confirm of that one applies.
    wait(browser, lambda d: d.find_element(By.ID, "fence").text.startswith("Generation 1 → 2:"))
    assert _preview_rows(browser)[0] == ["orders", "0", "70", "5"]
    assert browser.find_element(By.ID, "generation").text == "1"
    click(browser, "#reset-confirm")
    wait(browser, lambda d: d.find_element(By.ID, "generation").text == "2")
    assert _stored(http_server, group) == {0: "5", 1: "5", 2: "5"}


def test_a_reset_of_chosen_partitions_changes_only_those(browser: Any, http_server: HttpServer) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    group = _group(http_server)
    _open(browser, http_server, group)
    Select(browser.find_element(By.ID, "reset-scope")).select_by_value("orders")
    _tick_only(browser, "reset-partitions", {1})
    Select(browser.find_element(By.ID, "reset-target")).select_by_value("toOffset")
    browser.find_element(By.ID, "reset-value").send_keys("3")
    click(browser, "#reset-preview")
    wait(browser, lambda d: d.find_elements(By.ID, "fence"))
    assert _preview_rows(browser) == [["orders", "1", "20", "3"]]
    click(browser, "#reset-confirm")
    wait(browser, lambda d: d.find_element(By.ID, "generation").text == "1")
    wait(browser, lambda d: shown_offsets(d) == ["10", "3", "30"])
    assert _stored(http_server, group) == {0: "10", 1: "3", 2: "30"}


def test_delete_removes_exactly_the_chosen_partition_after_a_confirm(browser: Any, http_server: HttpServer) -> None:
    from selenium.webdriver.common.by import By

    group = _group(http_server)
    _open(browser, http_server, group)
    _tick_only(browser, "delete-partitions", {2})
    click(browser, "#delete-review")
    question = wait(browser, lambda d: d.find_element(By.ID, "delete-question"))
    assert "partition(s) 2 of orders" in question.text
    assert _stored(http_server, group) == {0: "10", 1: "20", 2: "30"}  # nothing before the confirm

    click(browser, "#delete-confirm")
    wait(browser, lambda d: shown_offsets(d) == ["10", "20"])
    assert "Deleted 1 offset(s)" in browser.find_element(By.ID, "message").text
    assert _stored(http_server, group) == {0: "10", 1: "20"}
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#timeline li.kind-CHANGE_KIND_DELETE"))


def test_delete_of_a_whole_topic(browser: Any, http_server: HttpServer) -> None:
    from selenium.webdriver.common.by import By

    group = _group(http_server, partitions=2)
    _open(browser, http_server, group)
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#delete-partitions input"))
    click(browser, "#delete-review")
    assert "every partition of orders" in wait(browser, lambda d: d.find_element(By.ID, "delete-question")).text
    click(browser, "#delete-confirm")
    wait(browser, lambda d: "Deleted 2 offset(s)" in d.find_element(By.ID, "message").text)
    assert _stored(http_server, group) == {}


def test_a_preview_says_which_offsets_lie_outside_the_log_and_clamp_sets_the_bound(
    browser: Any, http_server: HttpServer
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    group, topic = f"console-r-{uuid.uuid4().hex[:8]}", f"ranged-{uuid.uuid4().hex[:8]}"
    assert (
        http_server.curl(
            "CommitOffsets", {"groupId": group, "offsets": [{"topic": topic, "partition": 0, "offset": "150"}]}
        )[0]
        == 200
    )
    marks = [{"topic": topic, "partition": 0, "logStartOffset": "100", "logEndOffset": "200"}]
    assert http_server.curl("ReportWatermarks", {"watermarks": marks})[0] == 200
    _open(browser, http_server, group)
    Select(browser.find_element(By.ID, "reset-target")).select_by_value("toOffset")
    browser.find_element(By.ID, "reset-value").send_keys("250")
    click(browser, "#reset-preview")
    said = wait(browser, lambda d: d.find_element(By.ID, "out-of-range")).text
    assert f"{topic} [0]: offset 250 is past the log end 200: set as asked" in said
    assert _preview_rows(browser) == [[topic, "0", "150", "250"]]

    click(browser, "#reset-clamp")
    click(browser, "#reset-preview")
    wait(browser, lambda d: "set to 200 (clamp)" in d.find_element(By.ID, "out-of-range").text)
    assert _preview_rows(browser) == [[topic, "0", "150", "200"]]
    click(browser, "#reset-confirm")
    wait(browser, lambda d: d.find_element(By.ID, "generation").text == "1")
    assert _stored(http_server, group) == {0: "200"}
