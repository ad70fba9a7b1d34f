"""The console's adoption in a real browser: pasted positions, a dry run with the log's range, one fencing reset."""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from tests.fixtures.fix_console import click, open_group, sign_in, wait

if TYPE_CHECKING:
    from tests.fixtures.fix_http import HttpServer

pytestmark = pytest.mark.slow


def _ranged_group(http_server: HttpServer) -> tuple[str, str]:
    """A group at generation 0 with offset 150 on partitions 0 and 1 of a topic whose log is [100, 200)."""
    group, topic = f"console-a-{uuid.uuid4().hex[:8]}", f"adopted-{uuid.uuid4().hex[:8]}"
    offsets = [{"topic": topic, "partition": p, "offset": "150"} for p in (0, 1)]
    assert http_server.curl("CommitOffsets", {"groupId": group, "offsets": offsets})[0] == 200
    marks = [{"topic": topic, "partition": p, "logStartOffset": "100", "logEndOffset": "200"} for p in (0, 1)]
    assert http_server.curl("ReportWatermarks", {"watermarks": marks})[0] == 200
    return group, topic


def _rows(browser: Any) -> list[list[str]]:
    from selenium.webdriver.common.by import By

    return [
        [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        for tr in browser.find_elements(By.CSS_SELECTOR, "#adopt-table tbody tr")
    ]


def _paste(browser: Any, text: str, source: str) -> None:
    from selenium.webdriver.common.by import By

    area = wait(browser, lambda d: d.find_element(By.ID, "adopt-text"))
    area.clear()
    area.send_keys(text)
    field = browser.find_element(By.ID, "adopt-source")
    field.clear()
    field.send_keys(source)
    click(browser, "#adopt-preview-button")


def _history(http_server: HttpServer, group: str) -> list[dict[str, Any]]:
    return http_server.curl("ListOffsetHistory", {"groupId": group})[1].get("changes", [])


def test_a_pasted_kafka_csv_is_previewed_against_the_log_then_adopted_as_one_fencing_reset(
    browser: Any, http_server: HttpServer
) -> None:
    """Issue 49: adoption in the console, as `groups adopt --from-file` does it."""
    group, topic = _ranged_group(http_server)
    sign_in(browser, http_server, "admin")
    browser.get(f"{http_server.url}/#/?prefix={group}")
    open_group(browser, group, admin="yes")
    before = _history(http_server, group)

    # Kafka's 4-column CSV: another group's line is not this group's position.
    csv = f"GROUP,TOPIC,PARTITION,NEW-OFFSET\n{group},{topic},0,120\n{group},{topic},1,250\nother,{topic},0,7"
    _paste(browser, csv, "kafka group legacy-etl")
    fence = wait(browser, lambda d: d.find_element("id", "adopt-fence")).text
    assert fence.startswith("Dry run from kafka group legacy-etl: generation 0 → 1"), fence
    assert _rows(browser) == [
        [topic, "0", "150", "120", "200", ""],
        [topic, "1", "150", "250", "200", "past the log end 200"],
    ]
    assert _history(http_server, group) == before  # a dry run changes nothing

    # Spark's startingOffsets JSON, the same way.
    _paste(browser, json.dumps({topic: {"0": 130, "1": 90}}), "spark checkpoint /ckpt/orders (batch 41)")
    wait(browser, lambda d: _rows(d) == [[topic, "0", "150", "130", "200", ""], [topic, "1", "150", "90", "200", "before the log start 100"]])  # fmt: skip
    click(browser, "#adopt-confirm")
    wait(browser, lambda d: d.find_element("id", "generation").text == "1")

    stored = http_server.curl("FetchOffsets", {"groupId": group})[1]
    assert {o["partition"] if "partition" in o else 0: o["offset"] for o in stored["offsets"]} == {0: "130", 1: "90"}
    assert stored["generation"] == "1"
    adopted = [c for c in _history(http_server, group) if c.get("kind") == "CHANGE_KIND_ADOPT"]
    assert sorted((c.get("partition", 0), c["newOffset"], c["source"]) for c in adopted) == [
        (0, "130", "spark checkpoint /ckpt/orders (batch 41)"),
        (1, "90", "spark checkpoint /ckpt/orders (batch 41)"),
    ]


def test_a_paste_that_is_no_position_is_refused_before_any_call(browser: Any, http_server: HttpServer) -> None:
    group, topic = _ranged_group(http_server)
    sign_in(browser, http_server, "admin")
    browser.get(f"{http_server.url}/#/?prefix={group}")
    open_group(browser, group, admin="yes")
    before = _history(http_server, group)
    _paste(browser, f"{topic},0,-2", "a placeholder")
    said = wait(browser, lambda d: d.find_element("id", "adopt-preview").text)
    assert "a placeholder -2 or -1 is no position" in said, said
    assert not browser.find_element("id", "adopt-confirm").is_enabled()
    assert _history(http_server, group) == before
