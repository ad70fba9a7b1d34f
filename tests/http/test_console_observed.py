"""The console marks an observed group (issue 57) in the groups list and on its page, with where it is read."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import pytest

from tests.fixtures.fix_console import open_group, sign_in, wait

if TYPE_CHECKING:
    from tests.fixtures.fix_http import HttpServer

pytestmark = pytest.mark.slow


def test_an_observed_group_is_marked_in_the_list_and_on_its_page(browser: Any, http_server: HttpServer) -> None:
    from selenium.webdriver.common.by import By

    prefix = f"console-obs-{uuid.uuid4().hex[:6]}-"
    observed, committed = prefix + "spark", prefix + "etl"
    offsets = [{"topic": "console-obs", "partition": 0, "offset": "10"}]
    body = {"groupId": observed, "offsets": offsets, "source": "spark:query-7"}
    assert http_server.curl("ObserveOffsets", body)[0] == 200
    assert http_server.curl("CommitOffsets", {"groupId": committed, "offsets": offsets})[0] == 200

    sign_in(browser, http_server, "reader")
    browser.get(f"{http_server.url}/#/?prefix={prefix}")

    def marks(d: Any) -> dict[str, bool]:
        rows = d.find_elements(By.CSS_SELECTOR, "#groups-table tbody tr")
        return {
            r.find_element(By.CSS_SELECTOR, "a.group-link").text: bool(
                r.find_elements(By.CSS_SELECTOR, ".badge.observed")
            )
            for r in rows
        }

    wait(browser, lambda d: marks(d) == {observed: True, committed: False})
    open_group(browser, observed, admin="no")
    assert browser.find_element(By.CSS_SELECTOR, "#group-id .badge.observed").text == "observed"
    assert browser.find_element(By.ID, "observed-source").text == "spark:query-7"
