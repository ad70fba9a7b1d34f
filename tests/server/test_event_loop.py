"""The serving processes' event loop (runtime/event_loop.py): uvloop by default where installed, asyncio's own when asked."""

from __future__ import annotations

import logging
import sys

import pytest

from offsetstore.runtime import event_loop
from offsetstore.runtime.loop_thread import LoopThread
from offsetstore.server.config import Settings


async def _kind() -> str:
    return event_loop.running()


@pytest.mark.parametrize("choice", event_loop.EVENT_LOOPS)
def test_run_runs_on_the_loop_asked_for(choice: str) -> None:
    assert event_loop.run(_kind(), choice) == choice


def test_without_uvloop_the_server_says_so_once_and_serves_on_asyncio(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as on a platform where it is not installed
    with caplog.at_level(logging.WARNING, logger=event_loop.__name__):
        assert event_loop.resolve("uvloop") == "asyncio"
    assert [r.getMessage() for r in caplog.records] == [
        "uvloop is not installed here: serving on asyncio's own event loop (--event-loop asyncio)"
    ]
    assert event_loop.run(_kind(), "asyncio") == "asyncio"


def test_asking_for_asyncio_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=event_loop.__name__):
        assert event_loop.resolve("asyncio") == "asyncio"
        assert event_loop.resolve("uvloop") == "uvloop"  # installed with the server extra
    assert caplog.records == []


@pytest.mark.parametrize("given", ["trio", "", "UVLOOP"])
def test_an_unknown_event_loop_in_the_environment_stops_the_start(given: str) -> None:
    with pytest.raises(ValueError, match="OFFSETSTORE_EVENT_LOOP must be uvloop or asyncio"):
        Settings.load({}, {"OFFSETSTORE_EVENT_LOOP": given})


@pytest.mark.parametrize(("given", "kind"), [(None, "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")])
def test_a_loop_thread_runs_the_kind_the_servers_would(
    monkeypatch: pytest.MonkeyPatch, given: str | None, kind: str
) -> None:
    # The tests' and tools' in-process stores (LoopThread) run on what OFFSETSTORE_EVENT_LOOP names.
    if given is None:
        monkeypatch.delenv("OFFSETSTORE_EVENT_LOOP", raising=False)
    else:
        monkeypatch.setenv("OFFSETSTORE_EVENT_LOOP", given)
    with LoopThread() as thread:
        assert thread.run(_kind()) == kind


def test_a_loop_thread_refuses_an_unknown_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OFFSETSTORE_EVENT_LOOP", "trio")
    with pytest.raises(ValueError, match="OFFSETSTORE_EVENT_LOOP must be uvloop or asyncio"):
        LoopThread()
