"""OpenTelemetry traces of the server, off unless the standard ``OTEL_*`` environment variables ask for them.

Tracing is on when the environment names an exporter (``OTEL_TRACES_EXPORTER``, anything but
``none``) or an OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), and ``OTEL_SDK_DISABLED`` is not ``true``. Everything
else (service name, resource attributes, sampler, propagators, batching, the exporter's
endpoint, headers, TLS, timeout) is the SDK's own handling of its variables.

Off, nothing of OpenTelemetry is imported and no call pays for it: :func:`server_interceptors`
is empty and :func:`write_carry` None. On (the ``otel`` extra installed),
:mod:`offsetstore.server._otel` makes a span of every gRPC and HTTP call, every database
statement and puts the trace id in the log lines.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from offsetstore.runtime.async_store import Carry

__all__ = ["configured", "server_interceptors", "setup", "write_carry"]

log = logging.getLogger(__name__)

_lock = threading.Lock()
_done = False
_interceptors: tuple[Any, ...] = ()
_carry: Carry | None = None


def configured(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``environ`` asks for traces (see the module docstring)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER")
    if exporter is not None:
        return exporter.strip().lower() not in ("", "none")
    return bool(environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def setup(*, trust_callers: bool = False) -> bool:
    """Turns tracing on in this process if the environment asks; once per process (the first call's ``trust_callers``). True when on.

    Each serving process of ``serve --processes N`` sets up its own exporter (a tracer
    provider does not survive a spawn), so every process exports its spans itself.
    ``trust_callers`` (``serve --trace-trust-callers``): a caller's sampled flag is honoured,
    else it cannot raise sampling above the operator's ``OTEL_TRACES_SAMPLER``.
    """
    global _done, _interceptors, _carry
    with _lock:
        if _done:
            return bool(_interceptors)
        _done = True
        if not configured():
            return False
        try:
            from offsetstore.server import _otel
        except ImportError as error:
            log.warning(
                "OTEL_* asks for traces but OpenTelemetry is not installed (pip install 'offsetstore[otel]'): %s",
                error,
            )
            return False
        try:
            interceptor, _carry = _otel.install(trust_callers=trust_callers)
        except ValueError as error:  # an exporter or protocol the SDK does not know: serve, untraced
            log.error("traces are off: %s", error)
            return False
        _interceptors = (interceptor,)
        return True


def server_interceptors() -> tuple[Any, ...]:
    """The ``grpc.aio`` interceptors that trace calls (sets tracing up first); empty when tracing is off."""
    setup()
    return _interceptors


def write_carry() -> Carry | None:
    """What a group commit carries of its callers' traces (sets tracing up first); None when tracing is off."""
    setup()
    return _carry
