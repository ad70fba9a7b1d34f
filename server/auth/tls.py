"""Certificates: the gRPC server's TLS credentials, the HTTPS context of ``/metrics``, a client certificate's names."""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Mapping
from pathlib import Path

import grpc

from offsetstore.server.auth.principals import CERT_PREFIX, AuthConfigError

__all__ = ["certificate_identities", "server_credentials", "ssl_context"]


def certificate_identities(auth_context: Mapping[str, Iterable[bytes]]) -> list[str]:
    """The ``cert:`` names of a verified peer certificate, URI SANs (SPIFFE IDs) first, then its CN.

    gRPC reports a certificate without a CN as the empty CN; that names no one.
    """
    names = [f"{CERT_PREFIX}URI={u.decode('utf-8', 'replace')}" for u in auth_context.get("peer_uri", ()) if u]
    names += [f"{CERT_PREFIX}CN={c.decode('utf-8', 'replace')}" for c in auth_context.get("x509_common_name", ()) if c]
    return names


def server_credentials(cert_file: Path, key_file: Path, client_ca_file: Path | None = None) -> grpc.ServerCredentials:
    """TLS credentials of the server; with ``client_ca_file`` clients must present a certificate it signed."""

    def read(path: Path, what: str) -> bytes:
        try:
            data = Path(path).read_bytes()
        except OSError as error:
            raise AuthConfigError(f"cannot read the {what} {path}: {error.strerror or error}") from None
        if b"-----BEGIN" not in data:
            raise AuthConfigError(f"the {what} {path} is not PEM")
        return data

    cert, key = read(cert_file, "TLS certificate"), read(key_file, "TLS key")
    ca = None if client_ca_file is None else read(client_ca_file, "client CA bundle")
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)


def ssl_context(certfile: Path, keyfile: Path, client_cafile: Path | None) -> ssl.SSLContext:
    """The HTTPS context of ``/metrics``; with ``client_cafile``, clients must present a certificate it signed."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(certfile), str(keyfile))
    if client_cafile is not None:
        context.load_verify_locations(str(client_cafile))
        context.verify_mode = ssl.CERT_REQUIRED
    return context
