"""The gate's own CPU per call, in process, for two source trees side by side (issue 56 item 1).

bench/gate_shape.py measures a whole server process, transport included, and on a shared
machine its CPU per call moves by 10-20% from round to round. This one runs only what the
gate adds to a call: the gRPC handler the server registers (and, where a tree's metrics wrap
it as an interceptor, that wrapper), with tokens, admission, the grants, the quotas, the scan
cost, the deadline and the RPC metrics, around a servicer answering a canned FetchOffsets
response, driven by a stand-in of grpc's call context (no socket, no HTTP/2). Each tree
runs in a process of its own (imported from its ``src``), the trees alternate round by
round, and the time is the process's CPU time, so that other processes' load counts less.

Usage: ``python bench/gate_chain.py before=/tmp/old/src after=src [--seconds 2] [--rounds 5]``
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from typing import Any

from _memory_call import CallDetails, MemoryContext

TOKEN = "bench-token-of-the-gate-chain-bench"
TOKENS = """
[principals.bench]
token_sha256 = "{digest}"
grants = [{{ prefix = "bench-", permissions = ["commit"] }}]
"""


def _measure(tree: str, seconds: float, out: Any) -> None:
    sys.path.insert(0, tree)  # before anything of offsetstore is imported in this process
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="gate-chain-"))

    import grpc
    from prometheus_client import CollectorRegistry

    from offsetstore.server import gate as gate_module
    from offsetstore.server import metrics
    from offsetstore.server.admission import Admission
    from offsetstore.server.auth import AccessControl, AuthConfig, hash_token
    from offsetstore.server.limits import Limits
    from offsetstore.server.servicer import OffsetStoreServicer
    from offsetstore.v1 import offset_store_pb2 as pb

    response = pb.FetchOffsetsResponse(
        offsets=[pb.CommittedOffset(topic="bench", partition=p, offset=1) for p in range(16)], generation=1
    )
    request = pb.FetchOffsetsRequest(group_id="bench-group").SerializeToString()

    class Canned(OffsetStoreServicer):
        async def FetchOffsets(self, request: Any, context: Any) -> Any:  # noqa: N802  # the RPC's name
            return response

    async def run() -> float:
        auth = AccessControl(AuthConfig.parse(TOKENS.format(digest=hash_token(TOKEN))))
        [interceptor] = metrics.interceptors(CollectorRegistry())
        admission = Admission(max_calls=64, bytes_per_second=0)
        store: Any = None  # FetchOffsets touches no store in the policies (no scan, no quota lookup)
        if hasattr(gate_module, "ORDER"):  # the chain: metrics are its outermost policy
            gate = gate_module.Gate(
                Canned(store), store=store, admission=admission, limits=Limits(), auth=auth, observers=(interceptor,)
            )
        else:  # before it: policies as arguments, metrics an interceptor and an observer
            from offsetstore.server.partition_quota import PartitionQuota
            from offsetstore.server.quota import GroupQuota
            from offsetstore.server.scan_cost import ScanCost

            gate = gate_module.Gate(
                Canned(store),
                admission=admission,
                auth=auth,
                quota=GroupQuota(store, auth),
                partition_quota=PartitionQuota(store, auth),
                scan_cost=ScanCost(store),
                observers=(interceptor,),
            )
        details = CallDetails("FetchOffsets")
        handler = gate.handler().service(details)
        behaviour = interceptor.wrap(details.method, "client_stream", handler, handler.stream_unary)
        behaviour = behaviour or handler.stream_unary  # the chain's metrics do not wrap the handler

        async def one() -> None:
            async def requests() -> Any:
                yield request

            context = MemoryContext((("authorization", f"Bearer {TOKEN}"),))
            if await behaviour(requests(), context) is None or context.code() not in (None, grpc.StatusCode.OK):
                raise SystemExit(f"the call failed: {context.code()}")

        for _ in range(200):
            await one()  # warm
        n, started = 0, time.process_time()
        while (elapsed := time.process_time() - started) < seconds:
            for _ in range(100):
                await one()
            n += 100
        return elapsed / n * 1e6

    from offsetstore.runtime import event_loop

    out.put(event_loop.run(run(), "uvloop"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", metavar="LABEL=SRC")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    trees = {label: os.path.abspath(src) for label, src in (t.split("=", 1) for t in args.trees)}
    ctx = multiprocessing.get_context("spawn")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the start", flush=True)
    found: dict[str, list[float]] = {label: [] for label in trees}
    for _ in range(args.rounds):
        for label, tree in trees.items():
            out = ctx.Queue()
            process = ctx.Process(target=_measure, args=(tree, args.seconds, out))
            process.start()
            found[label].append(out.get())
            process.join()
            print(f"  {label}: {found[label][-1]:.1f} µs CPU per call", flush=True)
    first = sorted(found[next(iter(trees))])[len(found[next(iter(trees))]) // 2]
    print(f"the gate in process (FetchOffsets, tokens, metrics), {args.rounds} alternating rounds, median:")
    for label, values in found.items():
        median = sorted(values)[len(values) // 2]
        print(f"  {label}: {median:.1f} µs CPU per call (min {min(values):.1f}); ×{median / first:.2f}")


if __name__ == "__main__":
    main()
