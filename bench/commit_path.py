"""The server's Python per call without the transport: the gate, the servicer, the store and its database driver.

bench/gate_chain.py measures the gate around a canned servicer; bench/rpc_throughput.py the
whole server, grpc.aio included, whose CPU per call moves by 5-10% from window to window on
a shared machine. This one runs what a call costs between the two: the gRPC handler the
server registers (the gate's policies, the RPC metrics in multiprocess mode) around the
real servicer and :class:`~offsetstore.runtime.async_store.AsyncStore` (its group commit,
coalesced reads, psycopg) over a real PostgreSQL, driven by ``--clients`` concurrent
coroutines through a stand-in of grpc's call context (no socket, no HTTP/2). Each source
tree runs in a process of its own (imported from its ``src``), the trees alternate round
by round, and the figure is that process's CPU time per call (PostgreSQL's is not in it),
so that the machine's other load counts less than in a wall-clock rate.

Usage: ``python bench/commit_path.py before=/tmp/old/src after=src [--loads commit1 fetch16] [--seconds 3] [--rounds 4]``
(``OFFSETSTORE_BENCH_DATABASE_URL`` selects a PostgreSQL; otherwise an embedded one).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _memory_call import CallDetails, MemoryContext
from _server import database

LOADS = ("commit1", "commit16", "fetch16")


def _measure(tree: str, url: str, load: str, clients: int, seconds: float, out: Any) -> None:
    sys.path.insert(0, tree)  # before anything of offsetstore is imported in this process
    import asyncio
    import gc
    import uuid

    import grpc

    from offsetstore.runtime import event_loop
    from offsetstore.runtime.async_store import AsyncStore
    from offsetstore.server import metrics
    from offsetstore.server.admission import Admission
    from offsetstore.server.config import Settings
    from offsetstore.server.gate import Gate
    from offsetstore.server.limits import Limits
    from offsetstore.server.servicer import OffsetStoreServicer
    from offsetstore.v1 import offset_store_pb2 as pb

    metrics.use_multiprocess(tempfile.mkdtemp(prefix="commit-path-"))
    registry, observer = metrics.worker_metrics()
    partitions = 16 if load.endswith("16") else 1
    tag = uuid.uuid4().hex[:8]

    def commit(group: str, n: int) -> bytes:
        offsets = [pb.OffsetCommit(topic="bench", partition=p, offset=n) for p in range(partitions)]
        return pb.CommitOffsetsRequest(group_id=group, offsets=offsets).SerializeToString()

    async def run() -> tuple[float, int]:
        config = Settings().store_config(url, observer=observer)
        async with AsyncStore(config) as store:
            await store.warm()
            limits = Limits()
            [interceptor] = metrics.interceptors(registry)
            gate = Gate(
                OffsetStoreServicer(store),
                store=store,
                admission=Admission(max_calls=limits.calls_per_principal, max_anonymous_calls=limits.max_workers * 8),
                limits=limits,
                observers=(interceptor,),
            )
            method = "FetchOffsets" if load.startswith("fetch") else "CommitOffsets"
            handler = gate.handler()
            behaviours = {
                name: handler.service(CallDetails(name)).stream_unary  # type: ignore[union-attr]
                for name in ("CommitOffsets", "FetchOffsets")
            }

            async def one(data: bytes, method: str = method) -> None:
                behaviour = behaviours[method]

                async def requests() -> Any:
                    yield data

                context = MemoryContext()
                if await behaviour(requests(), context) is None or context.code() not in (None, grpc.StatusCode.OK):
                    raise SystemExit(f"the call failed: {context.code()}")

            groups = [f"bench-{tag}-{i}" for i in range(clients)]
            fetches = {g: pb.FetchOffsetsRequest(group_id=g).SerializeToString() for g in groups}
            for g in groups:
                await one(commit(g, 1), "CommitOffsets")
            calls = 0
            stop_at = 0.0

            async def client(group: str) -> None:
                nonlocal calls
                n = 1
                while time.monotonic() < stop_at:
                    n += 1
                    await one(fetches[group] if method == "FetchOffsets" else commit(group, n))
                    calls += 1

            stop_at = time.monotonic() + 0.5  # warm
            await asyncio.gather(*(client(g) for g in groups))
            gc.collect()
            gc.freeze()
            gc.set_threshold(50_000, 20, 100)  # as a serving process (server/workers.py)
            calls = 0
            started = time.process_time()
            stop_at = time.monotonic() + seconds
            await asyncio.gather(*(client(g) for g in groups))
            return time.process_time() - started, calls

    cpu, calls = event_loop.run(run(), "uvloop")
    out.put((cpu / calls * 1e6, calls / seconds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", metavar="LABEL=SRC")
    parser.add_argument("--loads", nargs="+", choices=LOADS, default=["commit1"])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    trees = {label: os.path.abspath(src) for label, src in (t.split("=", 1) for t in args.trees)}
    ctx = multiprocessing.get_context("spawn")
    workdir = Path(tempfile.mkdtemp(prefix="commit-path-"))
    try:
        with database(workdir) as url:
            _compare(trees, url, args, ctx)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _compare(trees: dict[str, str], url: str, args: argparse.Namespace, ctx: Any) -> None:
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the start", flush=True)
    found: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in range(args.rounds):
        labels = list(trees) if r % 2 == 0 else list(reversed(trees))
        for load in args.loads:
            for label in labels:
                out = ctx.Queue()
                process = ctx.Process(target=_measure, args=(trees[label], url, load, args.clients, args.seconds, out))
                process.start()
                found.setdefault((label, load), []).append(out.get())
                process.join()
                us, rate = found[(label, load)][-1]
                print(f"  {load} {label}: {us:.1f} µs CPU per call, {rate:,.0f}/s", flush=True)
    print(f"in process, {args.clients} clients, {args.rounds} alternating rounds, median µs CPU per call:")
    for load in args.loads:
        first = None
        for label in trees:
            values = sorted(us for us, _ in found[(label, load)])
            median = values[len(values) // 2]
            first = first or median
            print(f"  {load} {label}: {median:.1f} (min {values[0]:.1f}, max {values[-1]:.1f}); ×{median / first:.3f}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end", flush=True)


if __name__ == "__main__":
    main()
