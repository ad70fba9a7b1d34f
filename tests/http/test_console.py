"""The web console in a real browser (Debian's headless Chromium, driven by selenium) against a real server."""

from __future__ import annotations

import json
import os
import re
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.fixtures.fix_console import click, open_group, shown_offsets, sign_in, wait

if TYPE_CHECKING:
    from tests.fixtures.fix_http import HttpServer


pytestmark = pytest.mark.slow

# OFFSETSTORE_SCREENSHOTS=docs/images refreshes the README's pictures; otherwise they go to a
# scratch folder, so that a test run leaves the work tree as it was.
SCREENSHOTS = Path(os.environ.get("OFFSETSTORE_SCREENSHOTS") or tempfile.mkdtemp(prefix="offsetstore-console-"))
HOSTILE = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def seeded(http_server: HttpServer) -> str:
    """A prefix with two groups (watermarks reported), and the group named like a script."""
    prefix = f"console-{uuid.uuid4().hex[:6]}-"
    for name, partitions in ((prefix + "orders", 3), (prefix + "billing", 1), (HOSTILE, 1)):
        offsets = [{"topic": "console-orders", "partition": p, "offset": str(10 * (p + 1))} for p in range(partitions)]
        assert http_server.curl("CommitOffsets", {"groupId": name, "offsets": offsets})[0] == 200
    watermarks = [
        {"topic": "console-orders", "partition": p, "logStartOffset": "0", "logEndOffset": "100"} for p in range(3)
    ]
    assert http_server.curl("ReportWatermarks", {"watermarks": watermarks})[0] == 200
    return prefix


def test_an_admin_filters_opens_a_group_previews_and_confirms_a_reset(
    browser: Any, http_server: HttpServer, seeded: str
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    sign_in(browser, http_server, "admin")
    box = wait(browser, lambda d: d.find_element(By.ID, "prefix"))
    box.clear()
    box.send_keys(seeded)
    click(browser, "#filter")
    wait(browser, lambda d: d.find_element(By.ID, "count").text.startswith("2 group"))
    names = wait(browser, lambda d: [a.text for a in d.find_elements(By.CSS_SELECTOR, "a.group-link")])
    assert names == [seeded + "billing", seeded + "orders"]
    click(browser, "th[data-key=totalLag]")  # sortable: lag ascending, then descending
    wait(
        browser,
        lambda d: "sorted-asc" in d.find_element(By.CSS_SELECTOR, "th[data-key=totalLag]").get_attribute("class"),
    )
    click(browser, "th[data-key=totalLag]")
    wait(browser, lambda d: [a.text for a in d.find_elements(By.CSS_SELECTOR, "a.group-link")][0] == seeded + "orders")
    browser.save_screenshot(str(SCREENSHOTS / "console-groups.png"))

    open_group(browser, seeded + "orders", admin="yes")
    assert shown_offsets(browser) == ["10", "20", "30"]
    # Log ends were reported: each partition's lag in time is known (seconds since 100 was seen).
    lag_times = [
        row.find_elements(By.TAG_NAME, "td")[5].text
        for row in browser.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")
    ]
    assert all(re.fullmatch(r"\d+\.\d s", t) for t in lag_times), lag_times
    generation = int(browser.find_element(By.ID, "generation").text)
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#timeline li"))
    Select(browser.find_element(By.ID, "reset-target")).select_by_value("toOffset")
    browser.find_element(By.ID, "reset-value").send_keys("5")
    click(browser, "#reset-preview")
    fence = wait(browser, lambda d: d.find_element(By.ID, "fence"))
    assert fence.text.startswith(f"Generation {generation} → {generation + 1}:")
    rows = [
        [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        for tr in browser.find_elements(By.CSS_SELECTOR, "#preview-table tbody tr")
    ]
    assert rows == [
        ["console-orders", "0", "10", "5"],
        ["console-orders", "1", "20", "5"],
        ["console-orders", "2", "30", "5"],
    ]
    assert shown_offsets(browser) == ["10", "20", "30"]  # a preview changes nothing
    browser.save_screenshot(str(SCREENSHOTS / "console-reset-preview.png"))

    click(browser, "#reset-confirm")
    wait(browser, lambda d: d.find_element(By.ID, "generation").text == str(generation + 1))
    wait(browser, lambda d: shown_offsets(d) == ["5", "5", "5"])
    assert "generation is now" in browser.find_element(By.ID, "message").text
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#timeline li.kind-CHANGE_KIND_RESET"))
    browser.save_screenshot(str(SCREENSHOTS / "console-group.png"))
    fetched = http_server.curl("FetchOffsets", {"groupId": seeded + "orders"})[1]
    assert [o["offset"] for o in fetched["offsets"]] == ["5", "5", "5"]


def test_a_reader_sees_no_reset_or_import(browser: Any, http_server: HttpServer, seeded: str) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, http_server, "reader")
    browser.get(f"{http_server.url}/#/?prefix={seeded}")
    open_group(browser, seeded + "billing", admin="no")
    assert shown_offsets(browser) == ["10"]
    assert browser.find_elements(By.ID, "reset-preview") == []
    assert browser.find_elements(By.ID, "import-file") == []


def test_a_group_named_like_a_script_renders_as_text(browser: Any, http_server: HttpServer, seeded: str) -> None:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    sign_in(browser, http_server, "admin")
    browser.get(f"{http_server.url}/#/?prefix=%3Cscript%3E")
    wait(browser, lambda d: [a for a in d.find_elements(By.CSS_SELECTOR, "a.group-link") if a.text == HOSTILE])
    open_group(browser, HOSTILE, admin="yes")
    assert browser.find_element(By.ID, "group-id").text == HOSTILE
    with pytest.raises(TimeoutException):
        WebDriverWait(browser, 1).until(expected_conditions.alert_is_present())
    assert browser.find_elements(By.CSS_SELECTOR, "#main script") == []


# Holds back the first ListGroups answer for all groups (an empty prefix) by two seconds, and
# counts the answers held back, so a test can wait until the slow answer has come in.
_HOLD_BACK_THE_FIRST_LIST_OF_ALL = """
const original = window.fetch;
window.heldBack = 0;
let holding = true;
window.fetch = async (url, init) => {
  const answer = await original(url, init);
  const body = JSON.parse((init && init.body) || "{}");
  if (holding && String(url).endsWith("/ListGroups") && !body.prefix) {
    holding = false;
    await new Promise((resolve) => setTimeout(resolve, 2000));
    window.heldBack += 1;
  }
  return answer;
};
"""


def test_a_slow_answer_for_an_older_view_does_not_overwrite_the_newer_one(
    browser: Any, http_server: HttpServer, seeded: str
) -> None:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(http_server.url + "/")
    browser.execute_script("sessionStorage.clear()")
    browser.execute_script(_HOLD_BACK_THE_FIRST_LIST_OF_ALL)
    browser.find_element(By.ID, "token").send_keys(http_server.tokens["admin"])
    click(browser, "#use-token")  # lists all groups: that answer is held back
    box = wait(browser, lambda d: d.find_element(By.ID, "prefix"))
    box.send_keys(seeded)
    click(browser, "#filter")
    wait(browser, lambda d: d.find_element(By.ID, "count").text == "2 group(s)")
    wait(browser, lambda d: d.execute_script("return window.heldBack") == 1)
    with pytest.raises(TimeoutException):  # the list of all groups, come in late, is dropped
        WebDriverWait(browser, 2).until(lambda d: d.find_element(By.ID, "count").text != "2 group(s)")
    assert [a.text for a in browser.find_elements(By.CSS_SELECTOR, "a.group-link")] == [
        seeded + "billing",
        seeded + "orders",
    ]


def test_history_shows_no_previous_offset_of_a_first_commit_as_the_cli_does(
    browser: Any, http_server: HttpServer, seeded: str
) -> None:
    from selenium.webdriver.common.by import By

    group = seeded + "history"
    for offset in (100, 200):
        offsets = [{"topic": "console-orders", "partition": 0, "offset": str(offset)}]
        assert http_server.curl("CommitOffsets", {"groupId": group, "offsets": offsets})[0] == 200
    sign_in(browser, http_server, "admin")
    browser.get(f"{http_server.url}/#/?prefix={group}")
    open_group(browser, group, admin="yes")
    items = wait(browser, lambda d: [li.text for li in d.find_elements(By.CSS_SELECTOR, "#timeline li")])
    assert [item.split("console-orders [0]: ")[1].split(" generation")[0] for item in items] == ["100 → 200", "- → 100"]


# Keeps the body of every ResetOffsets the page sends, for a test to read.
_RECORD_RESETS = """
const original = window.fetch;
window.resets = [];
window.fetch = async (url, init) => {
  if (String(url).endsWith("/ResetOffsets")) window.resets.push(JSON.parse(init.body));
  return original(url, init);
};
"""


def test_a_reset_to_a_time_without_a_zone_reads_it_as_utc(browser: Any, http_server: HttpServer, seeded: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    # A browser east of UTC: a time read as the browser's own would be 05:30 off.
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Kolkata"})
    try:
        sign_in(browser, http_server, "admin")
        browser.get(f"{http_server.url}/#/?prefix={seeded}")
        open_group(browser, seeded + "billing", admin="yes")
        assert browser.execute_script("return new Date(2026, 0, 31).getTimezoneOffset()") == -330
        browser.execute_script(_RECORD_RESETS)
        Select(browser.find_element(By.ID, "reset-target")).select_by_value("toCommitTime")
        for typed, asked in (
            ("2026-01-31T12:00:00", "2026-01-31T12:00:00.000Z"),
            ("2026-01-31T12:00:00Z", "2026-01-31T12:00:00.000Z"),
            ("2026-01-31T12:00:00+01:00", "2026-01-31T11:00:00.000Z"),
        ):
            value = browser.find_element(By.ID, "reset-value")
            value.clear()
            value.send_keys(typed)
            click(browser, "#reset-preview")
            wait(browser, lambda d: d.find_elements(By.ID, "fence"))
            sent = browser.execute_script("return window.resets.pop()")
            assert (sent["toCommitTime"], sent["dryRun"]) == (asked, True), typed
    finally:
        browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": ""})


_REFUSE_THE_PERMISSION_PROBE = """
const original = window.fetch;
window.fetch = async (url, init) => {
  const body = JSON.parse((init && init.body) || "{}");
  if (String(url).endsWith("/ResetOffsets") && body.dryRun) {
    return new Response(JSON.stringify({ code: "resource_exhausted", message: "too many calls" }),
      { status: 429, headers: { "Content-Type": "application/json" } });
  }
  return original(url, init);
};
"""


def test_a_busy_server_does_not_show_a_reader_the_reset_controls(
    browser: Any, http_server: HttpServer, seeded: str
) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, http_server, "reader")
    browser.execute_script(_REFUSE_THE_PERMISSION_PROBE)
    browser.get(f"{http_server.url}/#/?prefix={seeded}")
    browser.execute_script(_REFUSE_THE_PERMISSION_PROBE)  # the hash change kept the page: the wrapper stays
    open_group(browser, seeded + "orders", admin="unsure")  # not "unknown": that is the page loading
    assert "reload to ask again" in browser.find_element(By.ID, "admin-unknown").text
    assert browser.find_elements(By.ID, "reset-preview") == []


def test_last_active_on_the_group_page_is_the_cli_describes_and_last_commit_the_cli_lists(
    browser: Any, http_server: HttpServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 59: the page's "Last active" was the last join (activeTime) while the CLI's was the last commit.

    Both are now the latest commit, join or reset; "Last commit" beside it is the list's LAST-COMMIT.
    """
    from datetime import datetime

    from selenium.webdriver.common.by import By

    from offsetstore.cli import groups as cli

    group = f"console-active-{uuid.uuid4().hex[:6]}"
    status, joined = http_server.curl("JoinGroup", {"groupId": group, "memberId": "worker-1"})
    assert status == 200, joined
    offsets = [{"topic": "console-orders", "partition": 0, "offset": "7"}]
    body = {"groupId": group, "generation": joined["generation"], "offsets": offsets}
    assert http_server.curl("CommitOffsets", body)[0] == 200  # after the join: the latest activity

    def cli_json(*argv: str) -> Any:
        capsys.readouterr()
        token = ["--token", http_server.tokens["admin"]]
        assert cli.main([*argv, "--output", "json", "--server", http_server.server.address, *token]) == 0
        return json.loads(capsys.readouterr().out)

    state = cli_json("describe", group, "--state")
    listed = next(g for g in cli_json("list", "--prefix", group) if g["group_id"] == group)

    sign_in(browser, http_server, "admin")
    browser.get(f"{http_server.url}/#/?prefix={group}")
    open_group(browser, group, admin="yes")

    def shown(label: str) -> datetime:
        xpath = f"//dl[@class='facts']/dt[.='{label}']/following-sibling::dd[1]/time"
        return datetime.fromisoformat(
            wait(browser, lambda d: d.find_element(By.XPATH, xpath)).get_attribute("datetime")
        )

    assert shown("Last active") == datetime.fromisoformat(state["last_active_time"])
    assert shown("Last commit") == datetime.fromisoformat(listed["last_commit_time"])
    assert shown("Last active") == shown("Last commit")  # the commit came after the join
