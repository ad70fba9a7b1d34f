"""``--command-config FILE``: the server, TLS and token settings of the groups commands kept in one file.

As kafka-consumer-groups' ``--command-config`` keeps a client's properties, a profile holds
``key=value`` lines (``#`` or ``!`` starts a comment) named as the options are, without their
dashes::

    server=offsetstore.internal:50051
    tls-ca=ca.pem
    tls-cert=me.pem
    tls-key=me-key.pem
    token-file=token.txt

An option given on the command line wins over the profile, and the profile over the
environment (``OFFSETSTORE_SERVER``, ``OFFSETSTORE_TOKEN``). Relative paths are read from the
profile's folder, so a profile works from any directory.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from offsetstore.cli._values import positive_seconds

__all__ = ["PROFILE_ENV", "ProfileError", "apply_profile"]

#: The profile used when no --command-config is given.
PROFILE_ENV = "OFFSETSTORE_COMMAND_CONFIG"

_PATHS = ("tls-ca", "tls-cert", "tls-key", "token-file")
_KEYS = ("server", "timeout", "output", "tls", "token", *_PATHS)


class ProfileError(ValueError):
    """A profile that cannot be read or holds something the commands do not take."""


def apply_profile(args: argparse.Namespace) -> None:
    """Fills the options the command line left unset from the profile, if there is one."""
    path = getattr(args, "command_config", None) or os.environ.get(PROFILE_ENV)
    if not path:
        return
    for key, value in _read(Path(path)).items():
        attribute = key.replace("-", "_")
        if key in ("token", "token-file") and (args.token is not None or args.token_file is not None):
            continue  # the command line's token, either way it was given, wins
        if getattr(args, attribute) not in (None, False):
            continue
        setattr(args, attribute, value)


def _read(path: Path) -> dict[str, object]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise ProfileError(f"cannot read the profile {path}: {reason}") from None
    settings: dict[str, object] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = (part.strip() for part in line.partition("="))
        if not sep:
            raise ProfileError(f"{path}: line {number}: expected key=value, got {line!r}")
        if key not in _KEYS:
            raise ProfileError(f"{path}: line {number}: unknown key {key!r} (known: {', '.join(_KEYS)})")
        try:
            settings[key] = _value(key, value, path.parent)
        except (ValueError, argparse.ArgumentTypeError) as error:
            raise ProfileError(f"{path}: line {number}: {key}: {error}") from None
    return settings


def _value(key: str, value: str, folder: Path) -> object:
    if key == "tls":
        if value.lower() not in ("true", "false"):
            raise ValueError(f"expected true or false, got {value!r}")
        return value.lower() == "true"
    if key == "timeout":
        return positive_seconds(value)
    if key == "output" and value not in ("table", "json"):
        raise ValueError(f"expected table or json, got {value!r}")
    if key in _PATHS:
        return str(folder / Path(value).expanduser())
    return value
