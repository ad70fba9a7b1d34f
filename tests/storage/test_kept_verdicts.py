"""A large group's verdict is kept by the maintenance round and given by its first page with its age (issue 55).

The first page of a group of more than ``LARGE_GROUP`` partitions no longer judges every
partition: it gives the verdict the maintenance evaluated over all of them, the same status
and reason as an evaluation then, saying how old it is. Where no kept verdict applies (none yet,
too old, another status window, a reset or a delete since), the page evaluates the group
itself, exactly as before. Every test works in the module's own database: a round evaluates
every large group of the database.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from offsetstore import storage
from offsetstore.core.types import GroupStatus, ResetRequest
from offsetstore.runtime import maintenance
from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store
from offsetstore.storage import PageRequest, kept_verdicts
from offsetstore.storage.status import DEFAULT_RULES, StatusRules, Verdict
from tests.fixtures.retention import fresh
from tests.fixtures.storage import engine_of

LARGE = kept_verdicts.LARGE_GROUP + 200
PAST_END = LARGE - 3  # in the group's last chunk: only a verdict over every partition sees it


@pytest.fixture(scope="module")
def vstore(module_database_url: str) -> Iterator[Store]:
    store = Store.open(StoreConfig(module_database_url, hot_pool_size=4))
    yield store
    store.dispose()


def _group(store: Store, partitions: int) -> str:
    """A group of ``partitions`` caught-up offsets on a topic of its own, one of them past its log end."""
    group_id, topic = fresh("kept-"), fresh("t-")
    with engine_of(store).begin() as conn:
        conn.execute(sa.text("INSERT INTO offsetstore.groups (group_id, generation) VALUES (:g, 1)"), {"g": group_id})
        conn.execute(
            sa.text(
                'INSERT INTO offsetstore.offsets (group_id, topic, partition, "offset", commit_time)'
                " SELECT :g, :t, i, CASE WHEN i = :past THEN 100 ELSE 10 END, now() - interval '1 minute'"
                " FROM generate_series(0, :n - 1) i"
            ),
            {"g": group_id, "t": topic, "n": partitions, "past": PAST_END},
        )
        conn.execute(
            sa.text(
                "INSERT INTO offsetstore.watermarks (topic, partition, log_start_offset, log_end_offset, updated_at)"
                " SELECT :t, i, 0, 10, now() FROM generate_series(0, :n - 1) i"
            ),
            {"t": topic, "n": partitions},
        )
    return group_id


def _evaluated(store: Store, group_id: str, rules: StatusRules = DEFAULT_RULES) -> Verdict:
    with engine_of(store).connect() as conn:
        return storage.drive_steps(conn, kept_verdicts.evaluate_steps(group_id, rules)).verdict


def _first_page(store: Store, group_id: str, rules: StatusRules = DEFAULT_RULES) -> Verdict:
    with engine_of(store).connect() as conn:
        page = PageRequest(page_size=100, key=storage.token_key(conn))
        described = storage.describe_group(conn, group_id, page, rules)
    assert len(described.partitions) == 100 and described.next_page_token
    return Verdict(described.status, described.status_reason)


def _round(store: Store) -> maintenance.RoundResult:
    result = store.wait(maintenance.Maintenance(store.aio, history_retention=0, offsets_retention=0).run_once())
    assert result is not None
    return result


def _kept(store: Store) -> set[str]:
    with engine_of(store).connect() as conn:
        return set(conn.execute(sa.text("SELECT group_id FROM offsetstore.group_verdicts")).scalars())


_AGE = re.compile(r" \(judged (\d+)s ago over ([\d,]+) partitions\)$")


def test_a_large_group_s_first_page_gives_the_kept_verdict_with_its_age(vstore: Store) -> None:
    group_id = _group(vstore, LARGE)
    exact = _evaluated(vstore, group_id)
    assert exact.status == GroupStatus.PAST_END and f":{PAST_END}: " in exact.reason
    # Before any round: the page evaluates the group itself, as before.
    assert _first_page(vstore, group_id) == exact

    assert group_id in _round(vstore).verdicts
    page = _first_page(vstore, group_id)
    found = _AGE.search(page.reason)
    assert found, page.reason
    assert page.status == exact.status
    assert page.reason[: found.start()] == exact.reason
    assert int(found.group(1)) < 60 and found.group(2) == f"{LARGE:,}"


def test_a_kept_verdict_is_not_given_under_another_window_past_its_age_or_after_a_reset(vstore: Store) -> None:
    group_id = _group(vstore, LARGE)
    _round(vstore)
    assert _AGE.search(_first_page(vstore, group_id).reason)

    other = StatusRules(window=120.0)
    assert _first_page(vstore, group_id, other) == _evaluated(vstore, group_id, other)

    with engine_of(vstore).begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE offsetstore.group_verdicts SET evaluated_at = now() - :age * interval '1 s' WHERE group_id = :g"
            ),
            {"g": group_id, "age": kept_verdicts.MAX_AGE + 1},
        )
    assert _first_page(vstore, group_id) == _evaluated(vstore, group_id)

    _round(vstore)
    assert _AGE.search(_first_page(vstore, group_id).reason)
    vstore.reset_offsets(ResetRequest(group_id, all_topics=True, to_offset=10))
    after = _first_page(vstore, group_id)
    # Judged at the call, after the reset (whose age in seconds an evaluation a moment later may not share).
    assert not _AGE.search(after.reason) and "no consumer commit since" in after.reason
    assert after.status == _evaluated(vstore, group_id).status


def test_the_round_keeps_large_live_groups_only(vstore: Store) -> None:
    small, large = _group(vstore, kept_verdicts.LARGE_GROUP), _group(vstore, LARGE)
    with engine_of(vstore).connect() as conn:
        due = {group_id for group_id, _ in kept_verdicts.due(conn, DEFAULT_RULES.window)}
    assert large in due and small not in due  # a round evaluates no group it will not keep
    kept = set(_round(vstore).verdicts)
    assert large in kept and small not in kept
    assert large in _kept(vstore) and small not in _kept(vstore)

    vstore.delete_offsets(large, all_topics=True)
    _round(vstore)
    assert large not in _kept(vstore)
