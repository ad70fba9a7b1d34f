"""Where and how the groups commands reach the server: its address, TLS and the bearer token."""

from __future__ import annotations

import argparse
import os
from typing import Any

import grpc

SERVER_ENV = "OFFSETSTORE_SERVER"
TOKEN_ENV = "OFFSETSTORE_TOKEN"
DEFAULT_PORT = 50051
DEFAULT_SERVER = f"127.0.0.1:{DEFAULT_PORT}"


class SecurityOptionError(ValueError):
    """A TLS or token option that cannot be used."""


def _read_file(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise SecurityOptionError(f"cannot read the {what} {path}: {e.strerror or e}") from None


def security_options(args: argparse.Namespace) -> dict[str, Any]:
    """The client's ``credentials`` and ``token`` from --tls*, --token, --token-file and OFFSETSTORE_TOKEN."""
    options: dict[str, Any] = {}
    tls_cert, tls_key = getattr(args, "tls_cert", None), getattr(args, "tls_key", None)
    if (tls_cert is None) != (tls_key is None):
        raise SecurityOptionError("--tls-cert and --tls-key go together")
    tls_ca = getattr(args, "tls_ca", None)
    if getattr(args, "tls", False) or tls_ca or tls_cert:
        options["credentials"] = grpc.ssl_channel_credentials(
            root_certificates=_read_file(tls_ca, "CA file") if tls_ca else None,
            private_key=_read_file(tls_key, "TLS key") if tls_key else None,
            certificate_chain=_read_file(tls_cert, "TLS certificate") if tls_cert else None,
        )
    token = getattr(args, "token", None)
    token_file = getattr(args, "token_file", None)
    if token is not None and token_file is not None:
        raise SecurityOptionError("give --token or --token-file, not both")
    if token_file is not None:
        token = _read_file(token_file, "token file").decode("utf-8", "replace").partition("\n")[0].strip()
    if token is None:
        token = os.environ.get(TOKEN_ENV) or None
    if token is not None:
        token = token.strip()
        if not token or not token.isascii() or not token.isprintable() or " " in token:
            raise SecurityOptionError("the bearer token must be printable ASCII without spaces")
        options["token"] = token
    return options


def with_default_port(server: str) -> str:
    """``host`` -> ``host:50051``: gRPC would dial port 443 for a target without a port."""
    if "://" in server or server.startswith(("unix:", "dns:", "ipv4:", "ipv6:")):
        return server  # a gRPC target URI says what it means
    if server.startswith("["):
        return server if "]:" in server else f"{server}:{DEFAULT_PORT}"
    if server.count(":") == 0:
        return f"{server}:{DEFAULT_PORT}"
    if server.count(":") > 1:
        return f"[{server}]:{DEFAULT_PORT}"  # a bare IPv6 address
    return server
