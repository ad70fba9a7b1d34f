"""Issue 36 in the console: each group's status badge, and the sparkline of lag in seconds from the sample ring."""

from __future__ import annotations

import os
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa

from offsetstore import storage
from offsetstore.core.types import Watermark
from tests.fixtures.fix_console import click, sign_in, wait

if TYPE_CHECKING:
    from tests.fixtures.fix_http import HttpServer

pytestmark = pytest.mark.slow

# OFFSETSTORE_SCREENSHOTS=docs/images refreshes docs/operations.md's picture.
SCREENSHOTS = Path(os.environ.get("OFFSETSTORE_SCREENSHOTS") or tempfile.mkdtemp(prefix="offsetstore-console-"))
RATE = 5  # records a second on each topic


def backdate(engine: sa.Engine, group_id: str, changes: list[tuple[float, int]], topic: str) -> None:
    """Rewrites the group's history as commits at (seconds ago, offset), the last one its stored offset."""
    now = datetime.now(UTC)
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM offsetstore.offset_history WHERE group_id = :g"), {"g": group_id})
        previous = None
        for ago, offset in changes:
            conn.execute(
                sa.text(
                    "INSERT INTO offsetstore.offset_history (group_id, topic, partition, previous_offset, new_offset, "
                    "kind, generation, change_time) VALUES (:g, :t, 0, :p, :o, 1, 0, :at)"
                ),
                {"g": group_id, "t": topic, "p": previous, "o": offset, "at": now - timedelta(seconds=ago)},
            )
            previous = offset
        conn.execute(
            sa.text('UPDATE offsetstore.offsets SET "offset" = :o, commit_time = :at WHERE group_id = :g'),
            {"g": group_id, "o": changes[-1][1], "at": now - timedelta(seconds=changes[-1][0])},
        )


def grow(engine: sa.Engine, topic: str, seconds: int) -> None:
    """Log end samples every 10 s over the last ``seconds``, the log growing RATE records a second; the last now."""
    now = datetime.now(UTC)
    with engine.begin() as conn:
        for ago in range(seconds, -1, -10):
            end = (seconds - ago) * RATE + 1000
            storage.report_watermarks(conn, [Watermark(topic, 0, 0, end)], at=now - timedelta(seconds=ago))


@pytest.fixture
def statuses(http_server: HttpServer, engine: sa.Engine) -> str:
    """Groups in four verdicts, with five minutes of log end samples each."""
    prefix = f"status-{uuid.uuid4().hex[:6]}-"
    end = 300 * RATE + 1000
    plans = {
        # name: commits at (seconds ago, offset); the stored offset is the last one
        "keeping-up": [(ago, end - ago * RATE - 5) for ago in range(300, -1, -5)],
        "slow": [(ago, 1000 + int((300 - ago) * RATE * 0.7)) for ago in range(300, -1, -5)],
        "stopped": [(ago, 1000 + (300 - ago) * RATE) for ago in range(300, 149, -5)],
        "lost": [(300, 400)],
    }
    for name, changes in plans.items():
        group, topic = prefix + name, f"{prefix}{name}-topic"
        assert (
            http_server.curl(
                "CommitOffsets", {"groupId": group, "offsets": [{"topic": topic, "partition": 0, "offset": "1"}]}
            )[0]
            == 200
        )
        backdate(engine, group, changes, topic)
        grow(engine, topic, 300)
    with engine.begin() as conn:  # retention deleted the records below 1200 of the lost group's topic
        storage.report_watermarks(conn, [Watermark(f"{prefix}lost-topic", 0, 1200, end)])
    return prefix


def test_the_console_shows_each_groups_status_and_its_lag_trend(
    browser: Any, http_server: HttpServer, statuses: str
) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, http_server, "admin")
    browser.get(f"{http_server.url}/#/?prefix={statuses}")
    expected = {"keeping-up": "OK", "lost": "LOST", "slow": "LAGGING", "stopped": "STOPPED"}

    def badges(d: Any) -> dict[str, str]:
        rows = d.find_elements(By.CSS_SELECTOR, "#groups-table tbody tr")
        return {
            r.find_element(By.CSS_SELECTOR, "a.group-link").text.removeprefix(statuses): r.find_elements(
                By.TAG_NAME, "td"
            )[-1].text
            for r in rows
        }

    wait(browser, lambda d: badges(d) == expected)
    click(browser, "th[data-key=status]")  # worst first
    wait(browser, lambda d: list(badges(d)) == ["lost", "stopped", "slow", "keeping-up"])
    browser.save_screenshot(str(SCREENSHOTS / "console-status.png"))

    browser.get(f"{http_server.url}/#/group/{statuses}stopped")
    wait(browser, lambda d: d.find_element(By.ID, "group-status").text == "STOPPED")
    assert "no commit for " in browser.find_element(By.ID, "status-reason").text
    line = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#partitions svg.sparkline polyline"))
    points = [tuple(map(float, p.split(","))) for p in line.get_attribute("points").split()]
    # y grows downwards: since the consumer stopped, each sample is further behind than the one before.
    assert len(points) >= 15 and points[-1][1] < points[-15][1]
    browser.save_screenshot(str(SCREENSHOTS / "console-status-group.png"))
