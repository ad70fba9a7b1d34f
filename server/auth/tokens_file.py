"""The tokens file (TOML): its principals, the hashes of their tokens and their grants, read and checked.

The format is drawn in :mod:`offsetstore.server.auth`'s docstring.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offsetstore.server.auth.principals import CERT_KINDS, CERT_PREFIX, AuthConfigError, Grant, Permission, Principal

__all__ = ["AuthConfig", "hash_token"]

log = logging.getLogger(__name__)


def hash_token(token: str) -> str:
    """The ``token_sha256`` a tokens file stores for ``token`` (lower-case hex).

    Unsalted and fast on purpose: a token is 256 random bits (``offsetstore token``), which no
    table or brute force reaches, and a slow salted hash per stored token per call would let
    any caller with a made-up token make the server burn CPU.
    """
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


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
        if not any(rest.startswith(kind) and len(rest) > len(kind) for kind in CERT_KINDS):
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
