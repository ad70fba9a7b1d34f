"""The Python work of one call outside the transport and the database, piece by piece (issue 33, item 4).

Each piece of a FetchOffsets of 16 partitions (and of a CommitOffsets of one) is run in a
loop in this process, without a server or a database: the storage core's steps around the
rows (validation, the page, the result), the conversions to and from protobuf, the RPC
metrics in multiprocess mode (as ``serve`` runs them), admission, and the caller's
deadline context. Each line is µs per call; divide by the echo's server CPU per call in a
``make bench`` run to see its share. Timings are printed, never asserted.

Usage: ``python bench/per_call.py [--seconds 1]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime

os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="offsetstore-per-call-"))

import grpc  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

from offsetstore import storage  # noqa: E402
from offsetstore.core import convert, convert_requests  # noqa: E402
from offsetstore.runtime.store import deadline  # noqa: E402
from offsetstore.server.admission import Admission  # noqa: E402
from offsetstore.server.metrics.rpc import ServerMetrics  # noqa: E402
from offsetstore.v1 import offset_store_pb2 as pb  # noqa: E402

NOW = datetime.now(UTC)
ROWS = [(1, "bench", p, 1000 + p, "", NOW, 53, 53 * (p + 1)) for p in range(16)]


def fetch_steps() -> None:
    page = storage.PageRequest(0, "", 1 << 20, b"k" * 32)
    steps = storage.fetch_offsets_steps("bench-group", None, page)
    next(steps)
    try:
        steps.send(ROWS)
    except StopIteration:
        return
    raise AssertionError("one statement expected")


REQUEST = pb.FetchOffsetsRequest(group_id="bench-group").SerializeToString()


def fetch_request() -> None:
    request = pb.FetchOffsetsRequest.FromString(REQUEST)
    convert_requests.selections_from_proto(request.topics)


def _result() -> storage.FetchResult:  # type: ignore[name-defined]
    page = storage.PageRequest(0, "", 1 << 20, b"k" * 32)
    steps = storage.fetch_offsets_steps("bench-group", None, page)
    next(steps)
    try:
        steps.send(ROWS)
    except StopIteration as done:
        return done.value
    raise AssertionError


RESULT = _result()


def fetch_response() -> None:
    convert.fetch_result_to_proto(RESULT).SerializeToString()


COMMIT = pb.CommitOffsetsRequest(
    group_id="bench-group", offsets=[pb.OffsetCommit(topic="bench", partition=0, offset=1)]
).SerializeToString()


def commit_request() -> None:
    request = pb.CommitOffsetsRequest.FromString(COMMIT)
    commits = [convert.offset_commit_from_proto(o) for o in request.offsets]
    storage.check_write(storage.CommitRequest(request.group_id, commits, 0, ""))


METRICS = ServerMetrics(CollectorRegistry())
FETCH_METRICS = METRICS.method("/offsetstore.v1.OffsetStoreService/FetchOffsets", "unary")


def rpc_metrics() -> None:
    FETCH_METRICS.started.inc()
    FETCH_METRICS.done(grpc.StatusCode.OK, time.perf_counter())


ADMISSION = Admission(max_calls=64)


def admission() -> None:
    ADMISSION.enter("bench", limited=True)
    ADMISSION.leave("bench", 100, limited=True)


def deadline_context() -> None:
    with deadline(5.0, lambda: True):
        pass


def rate(piece: Callable[[], None], seconds: float) -> float:
    """µs per call of ``piece``."""
    n, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        for _ in range(100):
            piece()
        n += 100
    return elapsed / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the start")
    pieces = {
        "fetch16: the storage core's steps around the rows (validation, page, result)": fetch_steps,
        "fetch16: request decoded and converted": fetch_request,
        "fetch16: response converted and serialized": fetch_response,
        "commit1: request decoded, converted and validated": commit_request,
        "RPC metrics (multiprocess): started + handled + latency": rpc_metrics,
        "admission: enter + leave": admission,
        "the caller's deadline (contextvar set + reset)": deadline_context,
    }
    asyncio.run(asyncio.sleep(0))
    for name, piece in pieces.items():
        print(f"  {rate(piece, args.seconds):7.1f} µs  {name}", flush=True)


if __name__ == "__main__":
    main()
