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

:class:`AccessControl` authenticates each call of the offset store service (health and
reflection stay open) and checks its RPC's permission (:data:`RPC_PERMISSIONS`) on the
request's group before the servicer runs; while the call runs, :data:`current_principal`
holds the caller's name, which the history records as the actor.

The package's modules: :mod:`.principals` (principals, grants, permissions),
:mod:`.tokens_file` (reading the tokens file), :mod:`.callers` (authenticating and
authorising a call), :mod:`.tls` (certificates) and :mod:`.token_strength` (how guessable a
token is). The names below are its public surface.
"""

from offsetstore.server.auth.callers import AccessControl
from offsetstore.server.auth.principals import (
    CERT_PREFIX,
    RPC_PERMISSIONS,
    AuthConfigError,
    Grant,
    Permission,
    Principal,
    current_principal,
)
from offsetstore.server.auth.tls import certificate_identities, server_credentials, ssl_context
from offsetstore.server.auth.token_strength import MIN_TOKEN_BITS, token_bits
from offsetstore.server.auth.tokens_file import AuthConfig, hash_token

__all__ = [
    "CERT_PREFIX",
    "MIN_TOKEN_BITS",
    "RPC_PERMISSIONS",
    "AuthConfig",
    "AuthConfigError",
    "AccessControl",
    "Grant",
    "Permission",
    "Principal",
    "certificate_identities",
    "current_principal",
    "hash_token",
    "server_credentials",
    "ssl_context",
    "token_bits",
]
