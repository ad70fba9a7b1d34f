"""Who is calling and what they may do: bearer tokens, mTLS identities, grants by group-id or topic prefix.

Off unless configured. A tokens file (TOML) names principals, the SHA-256 of their bearer
tokens, and their grants; a grant gives a permission on every group whose id starts with its
prefix (``""`` is every group), and admin implies commit implies read. Log watermarks are
per topic and steer every group's resets, so reporting them needs a topic grant (commit on
a ``topic_prefix``) or admin on every group::

    [principals.orders-etl]
    token_sha256 = "3690a4a2ed3b26b46a696e9ab873a300d9da3ae56bc84352e2bf724885c91dfd"  # SHA-256 of its token
    grants = [{ prefix = "orders-", permissions = ["commit"] }, { topic_prefix = "orders", permissions = ["commit"] }]
    max_groups = 500   # optional: groups it may create, over --max-groups-per-principal (0: no quota)
    max_partitions = 100000   # optional: partitions it may store, over --max-partitions-per-principal

    [principals."cert:CN=reporting.example.com"]   # an mTLS client, by its certificate's subject CN
    grants = [{ prefix = "", permissions = ["read"] }]

    [principals."cert:URI=spiffe://example.org/ns/prod/sa/billing"]   # or by a URI SAN (SPIFFE ID)
    grants = [{ prefix = "billing-", permissions = ["commit"] }]

``max_groups`` bounds the live groups under the prefixes a principal may commit to (see
:mod:`offsetstore.server.quota`); it wins over ``--max-groups-per-principal``, and an admin
on every group (``prefix = ""``) has no quota. ``max_partitions`` bounds the partitions stored
in those groups (see :mod:`offsetstore.server.partition_quota`), over
``--max-partitions-per-principal``, the same way.

Token principals and certificate principals live in separate namespaces: a bare name is
only ever reached by a token, a ``cert:`` name only by a certificate, so a certificate
with ``CN=oncall`` never gets the grants of the token principal ``oncall``.

:class:`AuthInterceptor` authenticates each call of the offset store service (health and
reflection stay open) and checks its RPC's permission (:data:`RPC_PERMISSIONS`) on the
request's group before the servicer runs; while the call runs, :data:`current_principal`
holds the caller's name, which the history records as the actor.
"""

from __future__ import annotations

import contextvars
import enum
import hashlib
import hmac
import logging
import math
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from offsetstore.core.errors import PermissionDeniedError, UnauthenticatedError
from offsetstore.v1 import offset_store_pb2 as pb

__all__ = [
    "RPC_PERMISSIONS",
    "AuthConfig",
    "AuthConfigError",
    "AuthInterceptor",
    "CERT_PREFIX",
    "Grant",
    "Permission",
    "Principal",
    "certificate_identities",
    "current_principal",
    "hash_token",
    "server_credentials",
]

log = logging.getLogger(__name__)

_SERVICE = pb.DESCRIPTOR.services_by_name["OffsetStoreService"].full_name

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
_CERT_KINDS = ("CN=", "URI=")


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


def hash_token(token: str) -> str:
    """The ``token_sha256`` a tokens file stores for ``token`` (lower-case hex).

    Unsalted and fast on purpose: a token is 256 random bits (``offsetstore token``), which no
    table or brute force reaches, and a slow salted hash per stored token per call would let
    any caller with a made-up token make the server burn CPU.
    """
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


#: Least entropy, in bits, ``offsetstore token --hash`` accepts in a token.
MIN_TOKEN_BITS = 128


# Orders a person types in or counts along: a character next to the one before it in any of
# them (either way) was predictable. Keyboard rows and columns (US layout), then counting.
_KEYBOARD_ROWS = ("`1234567890-=", "qwertyuiop[]\\", "asdfghjkl;'", "zxcvbnm,./")
_ORDERS = (
    *_KEYBOARD_ROWS,
    # Columns as the keys are staggered: 1qaz, 2wsx, ...
    *("".join(column) for column in zip(_KEYBOARD_ROWS[0][1:], *_KEYBOARD_ROWS[1:], strict=False)),
    "0123456789abcdefghijklmnopqrstuvwxyz",
)
_NEIGHBOURS: frozenset[tuple[str, str]] = frozenset(
    pair for order in _ORDERS for a, b in zip(order, order[1:], strict=False) for pair in ((a, b), (b, a))
)
# What naming a pattern costs: which of a few kinds (repeat, step, copy) and where it starts.
_PATTERN_START_BITS = 2.0


def _predictors(token: str, i: int) -> set[str]:
    """Which patterns predict ``token[i]`` from what came before it."""
    if i == 0:
        return set()
    prev, char = token[i - 1].lower(), token[i].lower()
    found = set()
    if token[i] == token[i - 1]:
        found.add("repeat")
    if (prev, char) in _NEIGHBOURS:
        step = ord(char) - ord(prev)
        found.add(f"step{step:+d}")
    if i >= 2 and token[i - 2 : i + 1] in token[:i]:
        found.add("copy")  # the last three characters already appeared: a repeat of a stretch
    return found


def token_bits(token: str) -> float:
    """An estimate, on the high side, of the entropy of ``token`` in bits.

    A character costs log2 of the alphabet its token's characters are drawn from, unless a
    pattern predicts it from the characters before it: a repeat (``aaaa``), a step along the
    alphabet, the digits or a keyboard row or column (``0123``, ``fedc``, ``qwer``, ``1qaz``),
    or a copy of an earlier stretch (``abcabc``). Starting a pattern costs 2 bits, carrying one
    on costs nothing. A token of few distinct characters is scaled down further. Random tokens
    (``offsetstore token``, ``secrets.token_hex(32)``) score far above `MIN_TOKEN_BITS`;
    ``0123456789abcdef0123456789abcdef`` scores about 18.
    """
    if not token:
        return 0.0
    classes = [
        any(c.islower() for c in token),
        any(c.isupper() for c in token),
        any(c.isdigit() for c in token),
        any(not c.isalnum() for c in token),
    ]
    alphabet = sum(size for used, size in zip(classes, (26, 26, 10, 32), strict=True) if used)
    if all(c in "0123456789abcdef" for c in token) or all(c in "0123456789ABCDEF" for c in token):
        alphabet = 16  # hex: 4 bits a digit, not the 36 of lower case and digits
    per_char = math.log2(max(alphabet, 2))
    bits = 0.0
    running: set[str] = set()
    for i in range(len(token)):
        predicted = _predictors(token, i)
        if predicted & running:
            running &= predicted  # the pattern goes on
        elif predicted:
            bits += min(_PATTERN_START_BITS, per_char)
            running = predicted
        else:
            bits += per_char
            running = set()
    # Few distinct characters carry little, however they are arranged.
    return bits * min(1.0, len(set(token)) / 16)


@dataclass(frozen=True)
class AuthConfig:
    """The principals of a tokens file and the hashes of their tokens."""

    principals: Mapping[str, Principal]
    token_hashes: tuple[tuple[bytes, str], ...] = field(default=())  # (sha256 digest, principal name)

    @classmethod
    def load(cls, path: Path) -> AuthConfig:
        try:
            text = Path(path).read_text(encoding="utf-8")
            mode = Path(path).stat().st_mode
        except (OSError, UnicodeDecodeError) as error:
            raise AuthConfigError(f"cannot read the tokens file {path}: {error}") from None
        if mode & 0o077:
            # Hashes are not tokens, but the file says who may do what: it is the server's alone.
            log.warning(
                "the tokens file %s can be read by its group or by everyone (mode %03o); chmod 600 it",
                path,
                mode & 0o777,
            )
        return cls.parse(text, str(path))

    @classmethod
    def parse(cls, text: str, source: str = "<tokens>") -> AuthConfig:
        """Reads a tokens file's TOML; any mistake is an :class:`AuthConfigError` naming it."""
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise AuthConfigError(f"{source}: not valid TOML: {error}") from None
        _keys(document, {"principals"}, source)
        table = document.get("principals", {})
        if not isinstance(table, dict):
            raise AuthConfigError(f"{source}: [principals] must be a table")
        principals: dict[str, Principal] = {}
        hashes: list[tuple[bytes, str]] = []
        owner: dict[bytes, str] = {}
        for name, entry in table.items():
            at = f"{source}: principals.{name}"
            if not name or not isinstance(entry, dict):
                raise AuthConfigError(f"{at}: each principal is a non-empty name with a table")
            _keys(entry, {"token_sha256", "grants", "max_groups", "max_partitions"}, at)
            for digest in _digests(entry.get("token_sha256", []), at):
                if digest in owner:
                    raise AuthConfigError(f"{at}: the same token is also given to {owner[digest]}")
                owner[digest] = name
                hashes.append((digest, name))
            principals[name] = Principal(
                name,
                tuple(_grants(entry.get("grants", []), at)),
                _quota("max_groups", entry.get("max_groups"), at),
                _quota("max_partitions", entry.get("max_partitions"), at),
            )
            _kind(name, entry, at)
        return cls(principals, tuple(hashes))

    def by_certificate(self, identities: Iterable[str]) -> Principal:
        """The ``cert:`` principal of the first of a certificate's ``identities`` the file names.

        A certificate the file does not name is known but may do nothing.
        """
        identities = list(identities)
        for identity in identities:
            found = self.principals.get(identity)
            if found is not None:
                return found
        return Principal(identities[0])

    def by_token(self, token: str) -> Principal | None:
        """The principal holding ``token``, comparing with every stored hash in constant time."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found = None
        for stored, name in self.token_hashes:
            # No early exit: the time taken says nothing about which hash came close.
            if hmac.compare_digest(stored, digest):
                found = name
        return None if found is None else self.principals[found]


def _keys(table: Mapping[str, Any], allowed: set[str], at: str) -> None:
    # A misspelt key ("permission", "token") must not silently grant or deny anything.
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise AuthConfigError(f"{at}: unknown key(s) {', '.join(unknown)}; expected {', '.join(sorted(allowed))}")


def _kind(name: str, entry: Mapping[str, Any], at: str) -> None:
    # Which namespace a principal lives in is said by its name, never guessed from a CN.
    if name.startswith(CERT_PREFIX):
        rest = name.removeprefix(CERT_PREFIX)
        if not any(rest.startswith(kind) and len(rest) > len(kind) for kind in _CERT_KINDS):
            raise AuthConfigError(f'{at}: a certificate principal is named "cert:CN=<common name>" or "cert:URI=<uri>"')
        if "token_sha256" in entry:
            raise AuthConfigError(f"{at}: a certificate principal has no tokens; give the tokens to a bare-named one")
    elif "token_sha256" not in entry:
        # The format before certificates had names of their own: a bare name without tokens
        # was a certificate's CN. Refuse it rather than silently drop that client's grants.
        raise AuthConfigError(
            f"{at}: a bare name is a token principal and needs token_sha256 (an empty list for none yet); "
            f'if it is an mTLS client, rename it [principals."cert:CN={name}"] (see docs/security.md)'
        )


def _digests(value: object, at: str) -> Iterable[bytes]:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list):
        raise AuthConfigError(f"{at}: token_sha256 must be a hex string or a list of them")
    for item in values:
        digest = None
        if isinstance(item, str) and len(item) == 64:
            try:
                digest = bytes.fromhex(item)
            except ValueError:
                pass
        if digest is None:
            # The value is not echoed: it may be a token pasted by mistake.
            raise AuthConfigError(
                f"{at}: token_sha256 must be 64 hex digits, the SHA-256 of the token "
                "(`offsetstore token` prints one); never the token itself"
            )
        yield digest


def _quota(key: str, value: object, at: str) -> int | None:
    # TOML's true is a Python int: refuse it rather than read it as a quota of 1.
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    raise AuthConfigError(f"{at}: {key} must be an integer >= 0 (0: no quota), not {value!r}")


def _grants(value: object, at: str) -> Iterable[Grant]:
    if not isinstance(value, list):
        raise AuthConfigError(f"{at}: grants must be a list of {{ prefix = ..., permissions = [...] }}")
    for i, grant in enumerate(value):
        where = f"{at}.grants[{i}]"
        if not isinstance(grant, dict):
            raise AuthConfigError(f"{where}: must be a table {{ prefix = ..., permissions = [...] }}")
        _keys(grant, {"prefix", "topic_prefix", "permissions"}, where)
        if "prefix" in grant and "topic_prefix" in grant:
            raise AuthConfigError(f"{where}: a grant is on groups (prefix) or on topics (topic_prefix), not both")
        topic = "topic_prefix" in grant
        prefix, permissions = grant.get("topic_prefix" if topic else "prefix"), grant.get("permissions")
        if not isinstance(prefix, str):
            raise AuthConfigError(f'{where}: prefix must be a string ("" for every group)')
        if not isinstance(permissions, list) or not permissions:
            raise AuthConfigError(f"{where}: permissions must be a non-empty list of read, commit, admin")
        levels = []
        for p in permissions:
            if not isinstance(p, str) or p.upper() not in Permission.__members__:
                raise AuthConfigError(f"{where}: unknown permission {p!r}; expected read, commit or admin")
            levels.append(Permission[p.upper()])
        yield Grant(prefix, max(levels), topic)


#: Every caller of a server with client certificates but no tokens file: the CA is the gate.
_ANY_GROUP_ADMIN = (Grant("", Permission.ADMIN),)

_VERBS = {Permission.READ: "read", Permission.COMMIT: "commit to", Permission.ADMIN: "administer"}


class AuthInterceptor:
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

    def authorize(self, principal: Principal, method: str, request: Any) -> None:
        """Raises PermissionDeniedError unless ``principal`` may call ``method`` with ``request``."""
        permission = RPC_PERMISSIONS.get(method)
        if permission is None:
            raise PermissionDeniedError(f"{method} is not open to any principal")
        if method == "ReportWatermarks":
            for topic in sorted({w.topic for w in request.watermarks}):
                if not principal.may_report(topic):
                    shown = repr(topic) if len(topic) <= 100 else repr(topic[:100]) + "..."
                    raise PermissionDeniedError(f"{principal.name} may not report watermarks of topic {shown}")
            return
        scope = _scope(method, request)
        if not principal.may(permission, scope):
            raise PermissionDeniedError(f"{principal.name} may not {_VERBS[permission]} {_what(method, scope)}")

    def _by_metadata(self, metadata: Iterable[tuple[str, Any]] | None) -> Principal | None:
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

    def authenticate(self, context: grpc.ServicerContext) -> Principal:
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


def certificate_identities(auth_context: Mapping[str, list[bytes]]) -> list[str]:
    """The ``cert:`` names of a verified peer certificate, URI SANs (SPIFFE IDs) first, then its CN.

    gRPC reports a certificate without a CN as the empty CN; that names no one.
    """
    names = [f"{CERT_PREFIX}URI={u.decode('utf-8', 'replace')}" for u in auth_context.get("peer_uri", ()) if u]
    names += [f"{CERT_PREFIX}CN={c.decode('utf-8', 'replace')}" for c in auth_context.get("x509_common_name", ()) if c]
    return names


def _what(method: str, scope: str) -> str:
    # Echo a bounded part only: the group id is the caller's, and it may be megabytes long.
    shown = repr(scope) if len(scope) <= 100 else repr(scope[:100]) + "..."
    return f"every group starting with {shown}" if method in _PREFIX_SCOPED else f"group {shown}"


# RPCs over every group whose id starts with the request's prefix, not over one group.
_PREFIX_SCOPED = ("ListGroups", "ExpireGroups")


def _scope(method: str, request: Any) -> str:
    return request.prefix if method in _PREFIX_SCOPED else request.group_id


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
