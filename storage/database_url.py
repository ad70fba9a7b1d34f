"""What a database URL means: every spelling libpq accepts, read by libpq itself, for every process that connects.

Accepted: libpq's URIs (``postgresql://`` or ``postgres://``, with SQLAlchemy's
``+psycopg`` driver suffix allowed) including the multi-host form
``postgresql://u@h1:5432,h2:5432/db?target_session_attrs=read-write`` and the query-list
form ``?host=h1,h2&port=5432,5432``; SQLAlchemy's repeated ``?host=h1:5432&host=h2:5432``;
and libpq's ``key=value`` connection strings. libpq parses them (``PQconninfoParse`` through
psycopg), so what works in ``psql`` works here, and a parameter libpq does not know is an
error naming it rather than something silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

__all__ = ["InvalidDatabaseUrl", "conninfo", "display", "normalize_url", "parse", "psycopg_connector"]

_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
# Values libpq checks only when it connects; checked here so that a typo is a bad URL, not an outage.
_CHOICES = {
    "target_session_attrs": ("any", "read-write", "read-only", "primary", "standby", "prefer-standby"),
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
}


class InvalidDatabaseUrl(ValueError):
    """A database URL that libpq would not accept; the message is one line and never holds the password."""


def normalize_url(url: str) -> str:
    """Return `url` with the psycopg 3 driver when it names plain PostgreSQL (SQLAlchemy's spelling).

    ``postgresql://`` and ``postgres://`` (libpq's and Heroku's spelling) become
    ``postgresql+psycopg://``; any other URL comes back unchanged.
    """
    scheme, sep, rest = url.partition("://")
    if sep and scheme in ("postgresql", "postgres"):
        return f"postgresql+psycopg://{rest}"
    return url


def parse(url: str) -> dict[str, str]:
    """libpq's connection parameters of ``url`` (see the module docstring for the spellings).

    Raises :class:`InvalidDatabaseUrl` for anything libpq would refuse, and for a port
    that is not a number (libpq would only notice when connecting).
    """
    if not isinstance(url, str) or not url.strip():
        raise InvalidDatabaseUrl("invalid database URL: it is empty")
    scheme, sep, rest = url.strip().partition("://")
    if sep:
        if scheme not in _SCHEMES:
            raise InvalidDatabaseUrl(
                f"invalid database URL: scheme {scheme!r} is not PostgreSQL's (postgresql:// or postgres://)"
            )
        text = "postgresql://" + _libpq_hosts(rest)
    elif "=" in url:
        text = url  # libpq's key=value form
    else:
        raise InvalidDatabaseUrl("invalid database URL: expected postgresql://... or libpq's key=value form")
    try:
        params = conninfo_to_dict(text)
    except psycopg.ProgrammingError as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else "libpq cannot parse it"
        raise InvalidDatabaseUrl(f"invalid database URL: {reason}") from None
    for port in str(params.get("port", "")).split(","):
        if port and not port.isdigit():
            raise InvalidDatabaseUrl(f"invalid database URL: port {port!r} is not a number")
    for key, allowed in _CHOICES.items():
        value = params.get(key)
        if value is not None and value not in allowed:
            raise InvalidDatabaseUrl(f"invalid database URL: {key} must be one of {', '.join(allowed)}, not {value!r}")
    return {key: str(value) for key, value in params.items() if value is not None}


def _libpq_hosts(rest: str) -> str:
    """SQLAlchemy's repeated ``host=h:port`` query parameters as libpq's lists; anything else unchanged."""
    location, mark, query = rest.partition("?")
    if not mark:
        return rest
    pairs = parse_qsl(query, keep_blank_values=True)
    hosts = [v for k, v in pairs if k == "host"]
    if len(hosts) < 2:
        return rest
    names, ports = [], []
    for host in hosts:
        name, colon, port = host.rpartition(":")
        if colon and port.isdigit() and not host.startswith("/"):
            names.append(name)
            ports.append(port)
        else:
            names.append(host)
            ports.append("")
    others = [(k, v) for k, v in pairs if k not in ("host", "port")]
    lists = [("host", ",".join(names))]
    if any(ports):
        lists.append(("port", ",".join(ports)))
    return f"{location}?{urlencode(lists + others, safe='/,:')}"


def conninfo(url: str, **extra: Any) -> str:
    """The libpq connection string of ``url`` with ``extra`` parameters added (they win)."""
    params: dict[str, Any] = {**parse(url), **extra}
    return make_conninfo("", **params)


def display(url: str) -> str:
    """``url`` for a log line or an error: the hosts, ports, database and role, never the password."""
    try:
        params = parse(url)
    except InvalidDatabaseUrl:
        return "(an invalid URL)"
    shown = {k: params[k] for k in ("host", "port", "dbname", "user") if k in params}
    return " ".join(f"{k}={v}" for k, v in shown.items()) or "(libpq's defaults)"


def psycopg_connector(url: str, **kwargs: Any) -> Callable[[], psycopg.Connection[Any]]:
    """A function that opens a psycopg connection to ``url`` (``kwargs``: ``connect()``'s), for SQLAlchemy's ``creator``."""
    target = conninfo(url)

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(target, **kwargs)

    return connect
