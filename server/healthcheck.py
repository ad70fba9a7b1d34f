"""The container's HEALTHCHECK: grpc.health.v1 of the local server, over TLS and mutual TLS when it serves them.

Reads the server's own ``OFFSETSTORE_*`` variables, so the same probe works whatever the
image is started with. Under TLS the server's certificate must verify: against
``OFFSETSTORE_HEALTHCHECK_CA_FILE`` (default: the certificate file itself, which works for a
self-signed certificate) for the name ``OFFSETSTORE_HEALTHCHECK_SERVER_NAME`` (default
``localhost``). Under mutual TLS the probe shows ``OFFSETSTORE_HEALTHCHECK_CERT_FILE`` and
``..._KEY_FILE`` (default: the server's own pair, if the client CA signed it). Exit 0 only
while the server reports SERVING.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def channel(environ: Mapping[str, str]) -> grpc.Channel:
    """A channel to the local server as ``environ`` configures it."""
    port = environ.get("OFFSETSTORE_LISTEN", "").rpartition(":")[2] or "50051"
    target = f"127.0.0.1:{port}"
    cert = environ.get("OFFSETSTORE_TLS_CERT_FILE")
    if not cert:
        return grpc.insecure_channel(target)
    roots = Path(environ.get("OFFSETSTORE_HEALTHCHECK_CA_FILE") or cert).read_bytes()
    key = chain = None
    if environ.get("OFFSETSTORE_TLS_CLIENT_CA_FILE"):
        chain = Path(environ.get("OFFSETSTORE_HEALTHCHECK_CERT_FILE") or cert).read_bytes()
        key = Path(environ.get("OFFSETSTORE_HEALTHCHECK_KEY_FILE") or environ["OFFSETSTORE_TLS_KEY_FILE"]).read_bytes()
    name = environ.get("OFFSETSTORE_HEALTHCHECK_SERVER_NAME") or "localhost"
    credentials = grpc.ssl_channel_credentials(roots, key, chain)
    return grpc.secure_channel(target, credentials, options=[("grpc.ssl_target_name_override", name)])


def main(environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    try:
        with channel(environ) as probe:
            response = health_pb2_grpc.HealthStub(probe).Check(health_pb2.HealthCheckRequest(), timeout=3)
    except (grpc.RpcError, OSError, KeyError) as error:
        print(f"unhealthy: {error}", file=sys.stderr)
        return 1
    return 0 if response.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main())
