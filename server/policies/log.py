"""A log line for every call: refused (before its request was read), failed, crashed (with the traceback), or served."""

from __future__ import annotations

import asyncio
import logging
import time

from google.protobuf.message import Message

from offsetstore.core.errors import OffsetStoreError
from offsetstore.server.call import Call
from offsetstore.server.policies.parts import Parts
from offsetstore.server.policy import Next

__all__ = ["Logged", "make"]

# The gate's lines keep the name they always had: operators filter on it.
log = logging.getLogger("offsetstore.server.gate")


class Logged:
    """Logs how each call ended, with its method, group, principal and milliseconds; a crash's traceback stays here."""

    async def __call__(self, call: Call, next: Next) -> Message:
        started = time.perf_counter()
        try:
            response = await next(call)
        except OffsetStoreError as error:
            log.info(
                "rpc refused" if call.request is None else "rpc failed",
                extra={**_fields(call, error.code.name, started), "reason": error.reason},
            )
            raise
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("rpc crashed", extra=_fields(call, "INTERNAL", started))
            raise
        if log.isEnabledFor(logging.DEBUG):
            log.debug("rpc", extra=_fields(call, "OK", started))
        return response


def _fields(call: Call, outcome: str, started: float) -> dict[str, object]:
    return {
        "rpc": call.method,
        "group": call.group,
        "outcome": outcome,
        "principal": call.caller,
        "ms": round((time.perf_counter() - started) * 1000, 2),
    }


def make(parts: Parts) -> Logged:
    return Logged()
