"""How guessable a token is: an estimate of its entropy, for ``offsetstore token --hash``."""

from __future__ import annotations

import math

__all__ = ["MIN_TOKEN_BITS", "token_bits"]

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
