"""The vocabulary of authentication: principals, their grants, and the permission each RPC needs."""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from offsetstore.core.calls import FACTS, Permission

__all__ = [
    "CERT_KINDS",
    "CERT_PREFIX",
    "RPC_PERMISSIONS",
    "AuthConfigError",
    "Grant",
    "Permission",
    "Principal",
    "current_principal",
]

#: The authenticated principal of the call being served; None while authentication is off.
current_principal: contextvars.ContextVar[str | None] = contextvars.ContextVar("offsetstore_principal", default=None)


#: The permission each RPC needs, as its ``(offsetstore.v1.call)`` option declares it
#: (:mod:`offsetstore.core.calls`). Group RPCs need it on the request's group_id, prefix
#: RPCs on its prefix (so that every group it could reach is covered), ReportWatermarks on
#: every topic it reports (a topic grant, or admin on every group).
RPC_PERMISSIONS: Mapping[str, Permission] = MappingProxyType({name: f.permission for name, f in FACTS.items()})


#: The prefix of a principal reached by a client certificate; the rest is ``CN=<common name>``
#: or ``URI=<subject alternative name URI>`` (a SPIFFE ID, say).
CERT_PREFIX = "cert:"
#: What follows the prefix: which part of the certificate names the principal.
CERT_KINDS = ("CN=", "URI=")


class AuthConfigError(ValueError):
    """A tokens file, certificate or key that cannot be used; the server does not start."""


@dataclass(frozen=True)
class Grant:
    """``permission`` on every group (or, for a topic grant, topic) whose name starts with ``prefix``."""

    prefix: str
    permission: Permission
    topic: bool = False


@dataclass(frozen=True)
class Principal:
    """A caller, by the name its history entries carry, with what it may do."""

    name: str
    grants: tuple[Grant, ...] = ()
    max_groups: int | None = None  # the tokens file's quota of groups; None: the server's default
    max_partitions: int | None = None  # the tokens file's quota of partitions; None: the server's default

    def may(self, permission: Permission, scope: str) -> bool:
        """Whether a group grant covers ``permission`` on the group (or group prefix) ``scope``."""
        return any(g.permission >= permission and scope.startswith(g.prefix) for g in self.grants if not g.topic)

    def may_report(self, topic: str) -> bool:
        """Whether this principal may report the watermarks of ``topic``: a topic grant, or admin on every group."""
        return self.may(Permission.ADMIN, "") or any(
            g.permission >= Permission.COMMIT and topic.startswith(g.prefix) for g in self.grants if g.topic
        )
