"""What tracing costs a commit: commit1's rate with tracing off, on, and before tracing existed, in one run.

Three servers of ``offsetstore serve`` over one PostgreSQL, measured in alternating rounds:

- ``before``: the code at ``--baseline`` (a commit; default: main's merge base), from ``git
  archive`` laid out as its wheel installs it, on this interpreter;
- ``off``: this checkout, no ``OTEL_*`` variables (tracing off, the default);
- ``on``: this checkout exporting every span (gRPC call, database statements) over OTLP/gRPC
  to a receiver in this process, which counts them.

Usage: ``OFFSETSTORE_BENCH_DATABASE_URL=postgresql://... python bench/tracing_overhead.py
[--seconds 5] [--rounds 3] [--concurrency 16]``. Rates are reported, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import tomllib
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

from _server import free_port
from rpc_throughput import measure

ROOT = Path(__file__).resolve().parents[1]


def lay_out(commit: str, directory: Path) -> Path:
    """``commit``'s packages where its wheel installs them (its package-dir mapping), under ``directory``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit], capture_output=True, check=True
    )
    source = directory / "source"
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(source, filter="data")
    site = directory / "site"
    mapping = tomllib.loads((source / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for name, folder in mapping.items():
        # An older commit maps each folder to its name; a newer one is a src/ tree of symlinks ("" = "src").
        for directory, _, files in os.walk(source / folder, followlinks=True):
            if "__pycache__" in Path(directory).parts:
                continue
            for file in files:
                path = Path(directory, file)
                target = site.joinpath(*name.split(".") if name else (), path.relative_to(source / folder))
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(path.read_bytes())
    return site


class Receiver:
    """An OTLP/gRPC TraceService that counts the spans it is sent."""

    def __init__(self) -> None:
        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

        self.spans = 0
        lock = threading.Lock()
        outer = self

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):  # noqa: N802
                n = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
                with lock:
                    outer.spans += n
                return trace_service_pb2.ExportTraceServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), self.server)
        self.endpoint = f"http://127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()


@contextlib.contextmanager
def serving(url: str, python_args: list[str], env: dict[str, str]) -> Iterator[tuple[str, int]]:
    from offsetstore.client import OffsetStoreClient

    listen = f"127.0.0.1:{free_port()}"
    command = [
        sys.executable, *python_args, "-m", "offsetstore.cli.main", "serve", "--database-url", url,
        "--listen", listen, "--metrics-listen", "", "--no-migrate", "--log-level", "WARNING", "--processes", "1",
    ]  # fmt: skip
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with OffsetStoreClient(listen, timeout=2) as client:
            for _ in range(300):
                with contextlib.suppress(Exception):
                    if client.health() == "SERVING":
                        break
                time.sleep(0.1)
        yield listen, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--client-processes", type=int, default=2)
    parser.add_argument(
        "--baseline", default=None, help="the commit measured as 'before' (default: merge base with main)"
    )
    args = parser.parse_args()
    from offsetstore.runtime import migrate

    url = migrate.normalize_url(os.environ["OFFSETSTORE_BENCH_DATABASE_URL"])
    migrate.upgrade(url)
    baseline = (
        args.baseline
        or subprocess.run(
            ["git", "-C", str(ROOT), "merge-base", "HEAD", "main"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    receiver = Receiver()
    plain = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    libraries = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    with tempfile.TemporaryDirectory(prefix="offsetstore-bench-") as directory:
        site = lay_out(baseline, Path(directory))
        variants = {
            "before": (["-S"], {**plain, "PYTHONPATH": os.pathsep.join([str(site), *libraries])}),
            "off": ([], plain),
            "on": (
                [],
                {
                    **plain,
                    "OTEL_TRACES_EXPORTER": "otlp",
                    "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                    "OTEL_EXPORTER_OTLP_INSECURE": "true",
                    "OTEL_SERVICE_NAME": "offsetstore-bench",
                },
            ),
        }
        rates: dict[str, list[float]] = {name: [] for name in variants}
        cpu: dict[str, list[float]] = {name: [] for name in variants}
        print(f"commit1, {args.concurrency} clients, {args.seconds:g} s a round; before = {baseline[:10]}")
        print(f"load average at start: {os.getloadavg()}")
        for round_ in range(args.rounds):
            for name, (python_args, env) in variants.items():
                with serving(url, python_args, env) as (listen, pid):
                    r = measure("commit1", listen, args.concurrency, args.seconds, args.client_processes, pid)
                rates[name].append(r["per_s"])
                cpu[name].append(r["cpu_us"])
                print(
                    f"round {round_ + 1} {name:6} {r['per_s']:8.0f}/s  p99 {r['p99_ms']:.1f} ms  CPU {r['cpu_us']:.0f} µs/call"
                )
        print(f"load average at end: {os.getloadavg()}; spans received while on: {receiver.spans:,}")
        # Rates move with the machine's load; the server's CPU per call much less: both, as medians.
        before, before_cpu = statistics.median(rates["before"]), statistics.median(cpu["before"])
        for name in variants:
            median, median_cpu = statistics.median(rates[name]), statistics.median(cpu[name])
            print(
                f"{name:6} median {median:8.0f}/s  ÷ before {median / before:.3f}"
                f"  CPU {median_cpu:.0f} µs/call  ÷ before {median_cpu / before_cpu:.3f}"
            )
        receiver.server.stop(None)


if __name__ == "__main__":
    main()
