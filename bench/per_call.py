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
from typing import Any

os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="offsetstore-per-call-"))

import grpc  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

from offsetstore import storage  # noqa: E402
from offsetstore.core import convert, convert_requests  # noqa: E402
from offsetstore.core.calls import FACTS  # noqa: E402
from offsetstore.runtime.store import deadline  # noqa: E402
from offsetstore.server import metrics  # noqa: E402
from offsetstore.server.admission import Admission  # noqa: E402
from offsetstore.server.auth import AccessControl, AuthConfig, hash_token  # noqa: E402
from offsetstore.server.call import Call  # noqa: E402
from offsetstore.server.gate import Gate  # noqa: E402
from offsetstore.server.interceptor import PolicyInterceptor  # noqa: E402
from offsetstore.server.limits import Limits  # noqa: E402
from offsetstore.server.metrics.rpc import ServerMetrics  # noqa: E402
from offsetstore.server.servicer import OffsetStoreServicer  # noqa: E402
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


class _Transport:
    """A call's transport as the gate reads it, with a token and a FetchOffsets request: no socket."""

    metadata = (("authorization", "Bearer bench-token-of-the-per-call-bench"),)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5000"

    def time_remaining(self) -> float | None:
        return 30.0

    def active(self) -> bool:
        return True

    async def message(self) -> bytes | None:
        return REQUEST


def gate_chain(seconds: float) -> float:
    """µs per call of the gate's whole chain with tokens and metrics, around a canned FetchOffsets answer."""
    tokens = AuthConfig.parse(
        f'[principals.bench]\ntoken_sha256 = "{hash_token(_Transport.metadata[0][1].split()[1])}"\n'
        'grants = [{ prefix = "bench-", permissions = ["commit"] }]\n'
    )
    response = convert.fetch_result_to_proto(RESULT)

    class Canned(OffsetStoreServicer):
        async def FetchOffsets(self, request: object, context: object) -> pb.FetchOffsetsResponse:  # noqa: N802
            return response

    async def run() -> float:
        store: Any = None  # FetchOffsets touches no store in the policies (no scan, no quota lookup)
        interceptors = metrics.interceptors(CollectorRegistry())
        gate = Gate(
            Canned(store),
            store=store,
            admission=Admission(max_calls=64, bytes_per_second=0),
            limits=Limits(),
            auth=AccessControl(tokens),
            observers=tuple(i for i in interceptors if isinstance(i, PolicyInterceptor)),
        )
        facts, transport = FACTS["FetchOffsets"], _Transport()
        n, started = 0, time.process_time()
        while (elapsed := time.process_time() - started) < seconds:
            for _ in range(100):
                await gate.run(Call(facts, transport=transport))
            n += 100
        return elapsed / n * 1e6

    return asyncio.run(run())


def rate(piece: Callable[[], None], seconds: float) -> float:
    """CPU µs per call of ``piece`` (process time: what other processes take of the cores does not count)."""
    n, started = 0, time.process_time()
    while (elapsed := time.process_time() - started) < seconds:
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
    chain = "the gate's chain with tokens (every policy, RPC metrics; the request decoded, no transport)"
    print(f"  {gate_chain(args.seconds):7.1f} µs  {chain}", flush=True)


if __name__ == "__main__":
    main()
