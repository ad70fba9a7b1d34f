"""Database URLs: every spelling libpq accepts, multi-host included; a bad one is one line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import quote

import pytest

from offsetstore.core.types import OffsetCommit, TopicPartition
from offsetstore.runtime import migrate
from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store
from offsetstore.storage import database_url
from offsetstore.storage.database_url import InvalidDatabaseUrl
from offsetstore.storage.engine import shares_sessions


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql://u@h1:5441,h2:5442/db?target_session_attrs=read-write",
            {"user": "u", "host": "h1,h2", "port": "5441,5442", "dbname": "db", "target_session_attrs": "read-write"},
        ),
        (
            "postgresql+psycopg://u@/db?host=h1,h2&port=5441,5442&target_session_attrs=primary",
            {"user": "u", "host": "h1,h2", "port": "5441,5442", "dbname": "db", "target_session_attrs": "primary"},
        ),
        (  # SQLAlchemy's spelling of several hosts
            "postgresql+psycopg://u@/db?host=h1:5441&host=h2:5442&target_session_attrs=read-write",
            {"user": "u", "host": "h1,h2", "port": "5441,5442", "dbname": "db", "target_session_attrs": "read-write"},
        ),
        ("postgres://u:p%40ss@h/db?sslmode=require", {"user": "u", "password": "p@ss", "host": "h", "dbname": "db"}),
        ("postgresql://postgres:@/postgres?host=/tmp/sock", {"user": "postgres", "host": "/tmp/sock"}),
        ("host=h1,h2 port=1,2 dbname=db", {"host": "h1,h2", "port": "1,2", "dbname": "db"}),
    ],
)
def test_every_spelling_libpq_accepts(url: str, expected: dict[str, str]) -> None:
    parsed = database_url.parse(url)
    assert {k: parsed[k] for k in expected} == expected


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql://u@h/db?foo=1", 'invalid URI query parameter: "foo"'),
        ("postgresql://u@h:port/db", "port 'port' is not a number"),
        ("mysql://u@h/db", "scheme 'mysql' is not PostgreSQL's"),
        ("postgresql://u@h/db?target_session_attrs=sometimes", "target_session_attrs must be one of any, read-write"),
        ("postgresql://u@h/db?sslmode=yes", "sslmode must be one of disable"),
        ("", "it is empty"),
        ("just words", "expected postgresql://"),
    ],
)
def test_a_url_libpq_would_refuse_is_one_line_naming_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(InvalidDatabaseUrl) as raised:
        database_url.parse(url)
    assert says in str(raised.value)
    assert "\n" not in str(raised.value)


def test_the_password_is_never_shown() -> None:
    shown = database_url.display("postgresql://alice:s3cret@h1:1,h2:2/db")
    assert "s3cret" not in shown
    assert shown == "host=h1,h2 port=1,2 dbname=db user=alice"


def _with_a_dead_host_first(url: str, form: str) -> str:
    """``url`` (the session's database) as a multi-host URL of ``form`` whose first host refuses."""
    params = database_url.parse(url)
    host, port = params.get("host", "127.0.0.1"), params.get("port", "5432")
    user, dbname = quote(params.get("user", "postgres")), quote(params.get("dbname", "postgres"))
    if form == "uri":  # libpq's own: host:port pairs in the authority, TCP only
        if host.startswith("/"):
            pytest.skip(
                "the URI form names TCP hosts; this run's PostgreSQL listens on a socket only (CI runs it on PostgreSQL 15)"
            )
        return f"postgresql://{user}@127.0.0.1:1,{host}:{port}/{dbname}?target_session_attrs=read-write"
    hosts = quote(f"127.0.0.1,{host}", safe=",")
    return f"postgresql://{user}@/{dbname}?host={hosts}&port=1,{port}&target_session_attrs=read-write"


@pytest.mark.parametrize("form", ["uri", "query-list"])
def test_a_multi_host_url_migrates_and_commits_on_the_host_that_answers(
    scratch_database_url: str, group_id: str, form: str
) -> None:
    url = _with_a_dead_host_first(scratch_database_url, form)
    migrate.upgrade(url)
    assert migrate.current(url) is not None
    store = Store.open(StoreConfig(url, hot_pool_size=2))
    try:
        store.commit_offsets(group_id, [OffsetCommit("t", 0, 7)])
        assert store.fetch_offsets(group_id).offsets[TopicPartition("t", 0)].offset == 7
    finally:
        store.dispose()


def test_a_direct_connection_keeps_its_session(database_url: str) -> None:
    assert shares_sessions(database_url) is False


@pytest.mark.parametrize("command", ["serve", "migrate"])
def test_the_command_line_says_what_is_wrong_with_a_url_in_one_line(command: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "offsetstore.cli.main", command, "--database-url", "postgresql://u:pw@h/db?foo=1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == 'offsetstore: invalid database URL: invalid URI query parameter: "foo"'
    assert "Traceback" not in done.stdout + done.stderr
