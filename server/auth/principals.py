"""The vocabulary of authentication: principals, their grants, and the permission each RPC needs."""

from __future__ import annotations

import contextvars
import enum
from collections.abc import Mapping
from dataclasses import dataclass

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


class Permission(enum.IntEnum):
    """What a grant allows; each level includes the ones below it."""

    READ = 1
    COMMIT = 2
    ADMIN = 3


#: The permission each RPC needs. Group RPCs need it on the request's group_id, ListGroups
#: on its prefix (so that every group it could list is covered), ReportWatermarks on every
#: topic it reports (a topic grant, or admin on every group). A method missing here is
#: refused to everyone.
RPC_PERMISSIONS: Mapping[str, Permission] = {
    "FetchOffsets": Permission.READ,
    "DescribeGroup": Permission.READ,
    "ListOffsetHistory": Permission.READ,
    "ListGroups": Permission.READ,
    "CommitOffsets": Permission.COMMIT,
    "JoinGroup": Permission.COMMIT,
    "ReportWatermarks": Permission.COMMIT,
    "ResetOffsets": Permission.ADMIN,
    "DeleteOffsets": Permission.ADMIN,
    "ExpireGroups": Permission.ADMIN,
}


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
