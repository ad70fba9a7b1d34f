"""What the settings ask of security, read and checked at start: TLS credentials, authentication, tokens reloads."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import grpc

from offsetstore.server.auth import AccessControl, AuthConfig, AuthConfigError, server_credentials
from offsetstore.server.config import Settings

__all__ = ["is_loopback", "reloader", "security", "tenant_prefixes"]

log = logging.getLogger(__name__)


def security(settings: Settings) -> tuple[grpc.ServerCredentials | None, AccessControl | None]:
    """The TLS credentials and the authentication the settings ask for, files read and checked now."""
    credentials = None
    if settings.tls_cert_file is not None and settings.tls_key_file is not None:
        credentials = server_credentials(settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file)
    mtls = settings.tls_client_ca_file is not None
    config = AuthConfig.load(settings.tokens_file) if settings.tokens_file is not None else None
    if config is not None and credentials is None:
        log.warning("bearer tokens over plaintext: anyone on the network can read them; use TLS outside local testing")
    if config is None and not mtls:
        # The HTTP API serves the same RPCs, the console's reset and delete buttons included.
        for listen in (settings.listen, settings.http_listen):
            if listen and not is_loopback(listen):
                log.warning(
                    "AUTHENTICATION IS OFF on %s: every caller that can reach it may read, commit, reset and delete "
                    "every group; set --tokens-file and/or --tls-client-ca (see docs/security.md)",
                    listen,
                )
        return credentials, None
    return credentials, AccessControl(config, mtls=mtls)


def reloader(auth: AccessControl, path: Path) -> Callable[[int, FrameType | None], None]:
    """A SIGHUP handler that rereads the tokens file: rotation without a restart.

    A file that does not load keeps the principals in force (and says why in the log).
    """

    def reload(signum: int, frame: FrameType | None) -> None:
        try:
            config = AuthConfig.load(path)
        except AuthConfigError as error:
            log.error("tokens file not reloaded, the previous one stays in force: %s", error)
            return
        auth.config = config  # one attribute: each call sees the old or the new file, never a mix
        log.info("tokens file reloaded", extra={"principals": len(config.principals)})

    return reload


def tenant_prefixes(auth: AccessControl | None) -> tuple[str, ...]:
    """The group prefixes the tokens file grants: the tenants group metrics are shared fairly between."""
    config = auth.config if auth is not None else None
    if config is None:
        return ()
    return tuple(sorted({g.prefix for p in config.principals.values() for g in p.grants if not g.topic}))


def is_loopback(listen: str) -> bool:
    """Whether ``listen`` (HOST:PORT) binds to loopback only; a name other than localhost counts as not."""
    host = listen.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
