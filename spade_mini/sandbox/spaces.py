"""The observation and action spaces of `SandboxedEnv`, and the one map of any text into them.

The sandbox passes any Python string (cut to a length). A `gymnasium.spaces.Text` needs a
finite character set, and one of all 1.1 M code points costs about 200 MB per space, so the
spaces hold the Basic Multilingual Plane without the surrogates: the 63,488 characters from
U+0000 to U+FFFF that are not U+D800-U+DFFF. That is every script in common use, accents,
arrows, units and most symbols ("25 °C → 30 °C"). `into_space` replaces a character outside it
(an emoji or another character above U+FFFF, a lone surrogate) by U+FFFD and cuts the text to
the space's length, so every observation `SandboxedEnv` returns and every action it sends is
inside its space by construction, whatever the environment or the agent wrote.

The character tables of a `Text` of this charset take 0.2 s and 11 MB to build, so they are
built once per process and length, and every space is a shallow copy with its own generator.
Omitted: a space for `info` (it is a dict of anything JSON can hold, checked by protocol.py).
"""
import copy
import functools
import re

import gymnasium

CHARSET_NAME = "U+0000-U+FFFF without the surrogates U+D800-U+DFFF"
CHARSET_SIZE = 0x10000 - 0x800  # 63,488 characters
OUTSIDE = re.compile("[\ud800-\udfff\U00010000-\U0010ffff]")
REPLACEMENT = "\ufffd"


class UnicodeText(gymnasium.spaces.Text):
    """`Text` over the charset, whose repr names it instead of printing all of it."""

    def __repr__(self) -> str:
        return f"Text({self.min_length}, {self.max_length}, charset={CHARSET_NAME})"


@functools.cache
def charset() -> str:
    """Every character of the spaces, in code point order (built on first use)."""
    return "".join(chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF)


@functools.cache
def _prototype(max_length: int) -> UnicodeText:
    return UnicodeText(max_length, min_length=0, charset=charset())


def text_space(max_length: int) -> UnicodeText:
    """A space of texts of 0 to `max_length` characters (its tables shared, its RNG not)."""
    space = copy.copy(_prototype(max_length))
    space._np_random = None  # seeded from entropy on first use, or by space.seed()
    return space


def into_space(text: str, max_length: int) -> tuple[str, int]:
    """(text cut to `max_length` with every character outside the charset replaced, how many)."""
    text, replaced = OUTSIDE.subn(REPLACEMENT, text[:max_length])
    return text, replaced
