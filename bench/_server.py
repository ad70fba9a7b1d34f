"""What the benchmarks share: a migrated PostgreSQL and ``offsetstore serve`` as a separate process."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Served:
    database_url: str
    address: str
    process: subprocess.Popen[bytes]
    log: Path


@contextlib.contextmanager
def served(
    *,
    max_workers: int | None = None,
    pool_size: int | None = None,
    extra_args: Sequence[str] = (),
    prefix: str = "offsetstore-bench-",
    program: Sequence[str] = ("-m", "offsetstore.cli.main"),
    env: dict[str, str] | None = None,
) -> Iterator[Served]:
    """A server over ``OFFSETSTORE_BENCH_DATABASE_URL``, or over an embedded PostgreSQL; healthy on entry.

    ``max_workers`` and ``pool_size`` left unset keep the server's defaults. ``program``: what
    the interpreter runs (bench/_levers_serve.py serves with some levers undone), with ``env``.
    """
    from offsetstore.client import OffsetStoreClient

    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        with database(workdir) as url:
            listen = f"127.0.0.1:{free_port()}"
            log = workdir / "serve.log"
            command = [
                sys.executable, *program, "serve", "--database-url", url, "--listen", listen,
                "--metrics-listen", "", "--no-migrate", "--log-level", "WARNING", *extra_args,
            ]  # fmt: skip
            if max_workers is not None:
                command += ["--max-workers", str(max_workers)]
            if pool_size is not None:
                command += ["--pool-size", str(pool_size)]
            with log.open("wb") as out:
                process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
            try:
                with OffsetStoreClient(listen, timeout=2) as client:
                    for _ in range(300):
                        try:
                            if client.health() == "SERVING":
                                break
                        except Exception:
                            time.sleep(0.1)
                yield Served(url, listen, process, log)
            finally:
                process.send_signal(signal.SIGTERM)
                process.wait(30)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def database(workdir: Path) -> Iterator[str]:
    """``OFFSETSTORE_BENCH_DATABASE_URL``, or an embedded PostgreSQL in ``workdir`` (stopped after); migrated."""
    from offsetstore.runtime import migrate

    embedded = None
    try:
        url = os.environ.get("OFFSETSTORE_BENCH_DATABASE_URL")
        if not url:
            from offsetstore.runtime.embedded import EmbeddedPostgres

            embedded = EmbeddedPostgres(workdir / "pgdata")
            url = embedded.start()
        url = migrate.normalize_url(url)
        migrate.upgrade(url)
        yield url
    finally:
        if embedded is not None:
            embedded.stop()
