"""How a ``serve`` setting is declared: ``setting()``'s field, its validity (``Valid``) and its variable's name."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

# Only the standard library: settings.py declares the fields with these, in a client-only install too.


@dataclass(frozen=True)
class Valid:
    """What a setting's value must be: ``test`` says whether it is, ``words`` say it (``... must be <words>``)."""

    test: Callable[[Any], bool]
    words: str

    def check(self, name: str, value: Any) -> None:
        """Raises ValueError naming the variable when ``value`` (None: unset, always valid) is not valid."""
        if value is not None and not self.test(value):
            raise ValueError(f"{env_name(name)} must be {self.words}")


def _noted(words: str, note: str | None) -> str:
    return f"{words} ({note})" if note else words


def at_least(low: float, note: str | None = None) -> Valid:
    """``low`` or more; ``note`` says what the edge means (``0: no limit``)."""
    return Valid(lambda value: value >= low, _noted(f"at least {low:g}", note))


def above(low: float) -> Valid:
    return Valid(lambda value: value > low, f"above {low:g}")


def between(low: float, high: float, note: str | None = None) -> Valid:
    return Valid(lambda value: low <= value <= high, _noted(f"between {low:g} and {high:g}", note))


def one_of(choices: tuple[str, ...], default: object) -> Valid:
    """A value among ``choices`` (a text setting's; its default too, where that is outside them: empty)."""
    allowed = {*choices, default}
    words = ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else choices[0]
    if default not in choices:
        words += ", or empty" if default == "" else f", or {default}"
    return Valid(lambda value: value in allowed, words)


def setting(
    default: T,
    help: str,
    *,
    flag: str | None = None,
    metavar: str | None = None,
    choices: tuple[str, ...] | None = None,
    group: str | None = None,
    duration: bool = False,
    auto: bool = False,
    factory: Callable[[], T] | None = None,
    shown: str | None = None,
    flag_help: str | None = None,
    valid: Valid | None = None,
) -> T:
    """A field of the settings with what its flag needs: ``help`` is its one line, ``flag`` the name when not ``--<name>``.

    ``duration``: read as ``90s``/``15m``/``12h``/``7d`` or seconds; ``auto``: also takes ``auto``
    (one per CPU); ``shown``: the default as help prints it, where the value is computed at start;
    ``flag_help``: the flag's own line where the flag says the opposite of the setting (``--no-migrate``);
    ``valid``: what its value must be, checked when the settings are made (a text setting's
    ``choices`` say it already). Checks that relate two settings are ``Settings``' own.
    """
    if valid is None and choices is not None and isinstance(default, str):
        valid = one_of(choices, default)
    metadata = {
        "help": help,
        "flag_help": flag_help,
        "flag": flag,
        "metavar": metavar,
        "choices": choices,
        "group": group,
        "duration": duration,
        "auto": auto,
        "shown": shown,
        "valid": valid,
    }
    if factory is not None:
        made: Any = dataclasses.field(default_factory=factory, metadata=metadata)
    else:
        made = dataclasses.field(default=default, metadata=metadata)
    return made  # type: ignore[no-any-return]  # a dataclasses.Field, which @dataclass turns into the default


def env_name(name: str) -> str:
    """The environment variable of setting ``name``: ``OFFSETSTORE_<NAME>``."""
    return f"OFFSETSTORE_{name.upper()}"
