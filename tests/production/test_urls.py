"""Every spelling of a multi-host URL that libpq takes works for `migrate` and `serve`; a bad URL is one line and exit 2."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from offsetstore.client import OffsetStoreClient
from tests.fixtures.fix_pg_cluster import DATABASE, PgCluster, pg_cluster
from tests.fixtures.fix_production import offsetstore, serving


@pytest.fixture(scope="module")
def cluster() -> Iterator[PgCluster]:
    with pg_cluster(synchronous=True) as cluster:
        yield cluster


def spellings(cluster: PgCluster) -> dict[str, str]:
    p, s = cluster.primary.port, cluster.standby.port
    # The plain multi-host spelling is the failover tests' own.
    return {
        "multi-host, +psycopg": cluster.url("postgresql+psycopg"),
        # The standby first: target_session_attrs makes libpq pass over it.
        "multi-host, standby first": f"postgresql://postgres@127.0.0.1:{s},127.0.0.1:{p}/{DATABASE}"
        "?target_session_attrs=read-write",
        "query list": cluster.query_list_url(),
    }


def test_migrate_takes_every_spelling(cluster: PgCluster) -> None:
    for name, url in spellings(cluster).items():
        done = offsetstore("migrate", "--database-url", url)
        assert done.returncode == 0, f"{name}: {url}\n{done.stdout}{done.stderr}"
    assert cluster.primary.query("SELECT count(*) FROM offsetstore.alembic_version") == 1


def test_serve_on_the_standby_first_url_writes_to_the_primary(cluster: PgCluster) -> None:
    with serving(spellings(cluster)["multi-host, standby first"]) as served:
        with OffsetStoreClient(served.address, timeout=20) as client:
            client.commit_offsets("url-spelling", {("orders", 0): 7})
    assert cluster.primary.query("SELECT \"offset\" FROM offsetstore.offsets WHERE group_id = 'url-spelling'") == 7


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres@127.0.0.1:1,127.0.0.1:x/db?target_session_attrs=read-write",
        "postgresql://postgres@127.0.0.1/db?no_such_parameter=1",
        "postgresql://postgres@127.0.0.1/db?target_session_attrs=sometimes",
    ],
)
@pytest.mark.parametrize("command", ["migrate", "serve"])
def test_a_bad_url_is_one_line_and_exit_2(command: str, url: str) -> None:
    extra = ["--listen", "127.0.0.1:0", "--metrics-listen", ""] if command == "serve" else []
    done = offsetstore(command, "--database-url", url, *extra, timeout=60)
    assert done.returncode == 2, f"{done.returncode}: {done.stdout}{done.stderr}"
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
