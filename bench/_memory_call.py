"""A stand-in of grpc.aio's call context for the in-process benches (gate_chain.py, commit_path.py).

What the gate and the RPC metrics ask of a call's context, answered from memory: no socket, no
HTTP/2, so that a bench measures the Python a call runs and not the transport's.
"""

from __future__ import annotations

from typing import Any


class MemoryContext:
    """A call's context: its metadata (e.g. a bearer token), a fixed peer and deadline, the status it is given."""

    def __init__(self, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self._metadata = metadata
        self._code: Any = None

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5000"

    def time_remaining(self) -> float:
        return 30.0

    def cancelled(self) -> bool:
        return False

    def done(self) -> bool:
        return False

    def code(self) -> Any:
        return self._code

    def set_code(self, code: Any) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        pass

    def set_trailing_metadata(self, metadata: Any) -> None:
        pass


class CallDetails:
    """grpc's HandlerCallDetails of one of offsetstore's methods."""

    def __init__(self, method: str, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.method = f"/offsetstore.v1.OffsetStoreService/{method}"
        self.invocation_metadata = metadata
