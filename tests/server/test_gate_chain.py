"""Adding a policy to the gate is a module and a line: it then runs for every call, gRPC and HTTP alike, at its place.

The policies here are this module's (a product policy is a module of ``server/policies``);
the line is the entry each adds to ``gate.ORDER``. A real gRPC server with its HTTP listener,
tokens and metrics, over the test database: the policies see every call of both transports,
in the chain's order (after authentication, before and after the request is read), and a
refusal of theirs reaches both callers as its status, counted once by the one metrics path.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.message import Message
from prometheus_client import CollectorRegistry

from offsetstore.client import OffsetStoreClient
from offsetstore.core.errors import PermissionDeniedError
from offsetstore.runtime.store import Store
from offsetstore.server import gate, metrics
from offsetstore.server.admission import Admission
from offsetstore.server.auth import AccessControl, AuthConfig, hash_token
from offsetstore.server.call import Call
from offsetstore.server.http import HttpConfig
from offsetstore.server.interceptor import PolicyInterceptor
from offsetstore.server.limits import Limits
from offsetstore.server.policies import access, read
from offsetstore.server.policies.parts import Parts
from offsetstore.server.policy import Next
from tests.fixtures.fix_server import ServerHandle

TOKEN = "gate-chain-tenant-4f9a0c1e7b2d48a6"
_TOKENS_FILE = f"""
[principals.chain-tenant]
token_sha256 = "{hash_token(TOKEN)}"
grants = [{{ prefix = "chain-", permissions = ["commit"] }}, {{ prefix = "closed-", permissions = ["commit"] }}]
"""

#: What the witnesses saw: (witness, transport adapter, method, principal, request read).
Seen = list[tuple[str, str, str, str | None, bool]]


class Witness:
    """Records each call it sees, as it is at the witness's place in the chain."""

    def __init__(self, name: str, seen: Seen) -> None:
        self.name = name
        self.seen = seen

    async def __call__(self, call: Call, next: Next) -> Message:
        kind = type(call.transport).__name__
        self.seen.append((self.name, kind, call.method, call.principal, call.request is not None))
        return await next(call)


class Closed:
    """Refuses every call on a group whose id starts with ``closed-``: a decision on the request, once read."""

    async def __call__(self, call: Call, next: Next) -> Message:
        if call.group.startswith("closed-"):
            raise PermissionDeniedError(f"group {call.group} is closed")
        return await next(call)


@pytest.fixture
def chained(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ServerHandle, Seen, CollectorRegistry]]:
    seen: Seen = []
    order = list(gate.ORDER)

    def before(entry: object) -> int:
        return order.index(entry)  # type: ignore[arg-type]

    # The one line each: a policy's entry in the order, where it belongs.
    order.insert(before(access.identified) + 1, lambda parts: Witness("identified", seen))
    order.insert(before(read.make) + 1, lambda parts: Witness("read", seen))
    order.insert(before(read.make) + 2, lambda parts: Closed())
    monkeypatch.setattr(gate, "ORDER", tuple(order))
    registry = CollectorRegistry()
    with ServerHandle(
        store,
        auth=AccessControl(AuthConfig.parse(_TOKENS_FILE)),
        interceptors=metrics.interceptors(registry),
        http=HttpConfig("127.0.0.1:0"),
    ) as server:
        yield server, seen, registry


def _http(server: ServerHandle, method: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    assert server.http is not None
    request = urllib.request.Request(
        f"{server.http.url}/offsetstore.v1.OffsetStoreService/{method}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read())


def _handled(registry: CollectorRegistry, code: str) -> float:
    labels = {"grpc_type": "unary", "grpc_service": "offsetstore.v1.OffsetStoreService", "grpc_method": "CommitOffsets"}
    return registry.get_sample_value("grpc_server_handled_total", {**labels, "grpc_code": code}) or 0.0


def test_a_policy_added_by_a_line_runs_for_grpc_and_http_calls_in_its_place(
    chained: tuple[ServerHandle, Seen, CollectorRegistry],
) -> None:
    server, seen, registry = chained
    with OffsetStoreClient(server.address, token=TOKEN) as client:
        client.commit_offsets("chain-grpc", {("t", 0): 5})
    status, _ = _http(server, "CommitOffsets", {"groupId": "chain-http", "offsets": [{"topic": "t", "offset": 7}]})
    assert status == 200
    assert seen == [
        # After authentication (the principal is known), before the request is read ...
        ("identified", "GrpcCall", "CommitOffsets", "chain-tenant", False),
        # ... and after it, by the same call: the order of gate.ORDER.
        ("read", "GrpcCall", "CommitOffsets", "chain-tenant", True),
        ("identified", "HttpCall", "CommitOffsets", "chain-tenant", False),
        ("read", "HttpCall", "CommitOffsets", "chain-tenant", True),
    ]
    assert _handled(registry, "OK") == 2  # one metrics path: each call counted once, whichever transport


def test_a_refusal_of_an_added_policy_is_each_transports_status_and_counted_once(
    chained: tuple[ServerHandle, Seen, CollectorRegistry],
) -> None:
    server, seen, registry = chained
    with OffsetStoreClient(server.address, token=TOKEN) as client:
        with pytest.raises(PermissionDeniedError) as raised:
            client.commit_offsets("closed-grpc", {("t", 0): 5})
    assert raised.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert raised.value.message == "group closed-grpc is closed"
    status, document = _http(server, "CommitOffsets", {"groupId": "closed-http", "offsets": [{"topic": "t"}]})
    assert (status, document["code"], document["message"]) == (403, "permission_denied", "group closed-http is closed")
    assert _handled(registry, "PermissionDenied") == 2
    errors = registry.get_sample_value(
        "offsetstore_rpc_errors_total", {"grpc_method": "CommitOffsets", "reason": "PERMISSION_DENIED", "limit": ""}
    )
    assert errors == 2
    assert [s[1] for s in seen if s[0] == "read" and s[2] == "CommitOffsets"] == ["GrpcCall", "HttpCall"]


def test_the_order_is_one_tuple_of_the_policies_a_server_is_configured_with(store: Store) -> None:
    # The server's observers (metrics, traces) first, then the log, authentication, admission,
    # the grants, the read, the quotas, the scan cost, the cost share and the deadline.
    def made(auth: AccessControl | None, observers: tuple[PolicyInterceptor, ...] = ()) -> list[str]:
        parts = Parts(store.aio, Admission(max_calls=1), auth, Limits(), 1.0, observers)
        return [type(p).__name__ for p in gate.policies(parts, gate.ORDER)]

    assert made(None) == ["Logged", "Identified", "CountedIn", "Read", "ScanCost", "Shared", "Deadline"]
    [observer] = metrics.interceptors(CollectorRegistry())
    assert isinstance(observer, PolicyInterceptor)
    assert made(AccessControl(AuthConfig.parse(_TOKENS_FILE)), (observer,)) == [
        "MetricsInterceptor",
        "Logged",
        "Identified",
        "CountedIn",
        "MethodGranted",
        "Read",
        "RequestGranted",
        "GroupQuota",
        "PartitionQuota",
        "ScanCost",
        "Shared",
        "Deadline",
    ]
