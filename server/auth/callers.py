"""Who is calling and whether the request is within their grants: what the gate asks for every call."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from offsetstore.core.calls import CallFacts, Scope
from offsetstore.core.errors import PermissionDeniedError, UnauthenticatedError
from offsetstore.server.auth.principals import RPC_PERMISSIONS, Grant, Permission, Principal
from offsetstore.server.auth.tls import certificate_identities
from offsetstore.server.auth.tokens_file import AuthConfig

__all__ = ["AccessControl", "CallerContext", "Metadata", "Request"]

#: Every caller of a server with client certificates but no tokens file: the CA is the gate.
_ANY_GROUP_ADMIN = (Grant("", Permission.ADMIN),)

_VERBS = {Permission.READ: "read", Permission.COMMIT: "commit to", Permission.ADMIN: "administer"}


#: A call's metadata as grpc gives it: (key, value) pairs, binary values as bytes.
Metadata = Iterable[tuple[str, str | bytes]]


class Request(Protocol):
    """What authorisation reads of a call once its request is read (the gate's :class:`~offsetstore.server.call.Call`)."""

    @property
    def facts(self) -> CallFacts: ...

    @property
    def scope(self) -> str:
        """The group id, or a prefix RPC's prefix, the permission is checked on."""

    @property
    def reported_topics(self) -> list[str]:
        """The topics a watermark report names."""


class CallerContext(Protocol):
    """What authentication reads of a call: its metadata and its TLS peer (grpc.aio's context, the HTTP listener's)."""

    def invocation_metadata(self) -> Metadata | None: ...

    def auth_context(self) -> Mapping[str, Iterable[bytes]]: ...


class AccessControl:
    """Authenticates and authorises each call of the offset store service before it runs.

    The server's gate (:mod:`offsetstore.server.gate`) asks it, for each call, who the
    caller is (:meth:`authenticate`: from the metadata and the TLS peer, before the request
    is read) and whether the request is within its grants (:meth:`authorize`).

    With ``config``, a call carries ``authorization: Bearer <token>`` of one of its
    principals or, when ``mtls``, a client certificate whose URI SAN or subject CN names a
    ``cert:`` principal (one it does not list is known but may do nothing). A token, when
    sent, decides. Without ``config`` (client certificates alone), every verified client may
    do everything. A certificate that names nobody (no CN, no URI) is UNAUTHENTICATED.
    """

    def __init__(self, config: AuthConfig | None, *, mtls: bool = False) -> None:
        if config is None and not mtls:
            raise ValueError("authentication needs a tokens file, client certificates, or both")
        self.config = config
        self.mtls = mtls

    def authorize_method(self, principal: Principal, facts: CallFacts) -> None:
        """Raises PermissionDeniedError unless some grant of ``principal`` could allow the method of ``facts`` at all.

        Decided from the metadata, before the request is read: a caller without a grant that
        could cover the call gets no body read or decoded (issue 34).
        """
        permission = RPC_PERMISSIONS.get(facts.method)
        if permission is None:
            raise PermissionDeniedError(f"{facts.method} is not open to any principal")
        topics = facts.scope is Scope.TOPICS
        if not any(g.permission >= permission and g.topic == topics for g in principal.grants) and not (
            topics and principal.may(Permission.ADMIN, "")
        ):
            what = "report watermarks of any topic" if topics else f"{_VERBS[permission]} any group"
            raise PermissionDeniedError(f"{principal.name} may not {what}")

    def authorize(self, principal: Principal, call: Request) -> None:
        """Raises PermissionDeniedError unless ``principal`` may make ``call`` (its method, with its request)."""
        facts = call.facts
        permission = RPC_PERMISSIONS.get(facts.method)
        if permission is None:
            raise PermissionDeniedError(f"{facts.method} is not open to any principal")
        if facts.scope is Scope.TOPICS:
            for topic in call.reported_topics:
                if not principal.may_report(topic):
                    shown = repr(topic) if len(topic) <= 100 else repr(topic[:100]) + "..."
                    raise PermissionDeniedError(f"{principal.name} may not report watermarks of topic {shown}")
            return
        scope = call.scope  # the group id, or a prefix RPC's prefix
        if not principal.may(permission, scope):
            raise PermissionDeniedError(f"{principal.name} may not {_VERBS[permission]} {_what(facts, scope)}")

    def _by_metadata(self, metadata: Metadata | None) -> Principal | None:
        """The token's principal; None when the call has no token and may yet pass by its certificate.

        Raises UnauthenticatedError for a bad token, or for no token where only a token admits.
        """
        values = [v for k, v in metadata or () if k == "authorization"]
        if values:
            if self.config is None:
                raise UnauthenticatedError("this server takes no bearer tokens; it authenticates client certificates")
            scheme, _, token = (values[0] if isinstance(values[0], str) else "").partition(" ")
            token = token.strip()
            if len(values) > 1 or scheme.lower() != "bearer" or not token:
                raise UnauthenticatedError("the authorization metadata must be one 'Bearer <token>'")
            principal = self.config.by_token(token)
            if principal is None:
                raise UnauthenticatedError("the bearer token is not valid")
            return principal
        if not self.mtls:
            raise UnauthenticatedError(
                "this server needs a bearer token: send the metadata 'authorization: Bearer <token>'"
            )
        return None

    def authenticate(self, context: CallerContext) -> Principal:
        """The caller of ``context``, or UnauthenticatedError."""
        principal = self._by_metadata(context.invocation_metadata())
        if principal is not None:
            return principal
        if self.mtls:
            identities = certificate_identities(context.auth_context())
            if not identities:
                raise UnauthenticatedError(
                    "the client certificate names no one: it needs a subject common name or a URI subject "
                    "alternative name (a SPIFFE ID)"
                )
            if self.config is None:
                return Principal(identities[0], _ANY_GROUP_ADMIN)
            return self.config.by_certificate(identities)
        raise AssertionError("unreachable: without mTLS, _by_metadata finds a principal or raises")


def _what(facts: CallFacts, scope: str) -> str:
    # Echo a bounded part only: the group id is the caller's, and it may be megabytes long.
    # A prefix RPC reaches every group whose id starts with the request's prefix.
    shown = repr(scope) if len(scope) <= 100 else repr(scope[:100]) + "..."
    return f"every group starting with {shown}" if facts.scope is Scope.PREFIX else f"group {shown}"
