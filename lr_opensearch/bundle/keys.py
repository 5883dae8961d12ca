"""The sparse key encoding shared by the ingest (document) and query sides: ``lrk1``.

A LightRetriever sparse vector is ``{token: weight}``. In OpenSearch / Elasticsearch it
is stored in a ``rank_features`` field, whose feature names become sub-field names
(``lr_sparse.<key>`` in a ``rank_feature`` query). Engine rules for those names: not
empty, no ``.`` (the engines split field paths at dots and reject dotted feature names),
and nothing starting with ``_`` (reserved for metadata fields). Vocabularies contain
tokens such as ``.``, ``..``, ``a.b``, ``_x``, ``" "``, ``##ing`` (WordPiece),
``Ġthe`` / ``âĢĻ`` / ``Ċ`` (byte-level BPE) and any Unicode text, so tokens are encoded.

Scheme ``lrk1``:

* ASCII letters and digits ``[A-Za-z0-9]`` are kept as they are, so word tokens stay
  readable in explain output and Dashboards (``paris`` -> ``paris``).
* Every other character is written as ``-`` followed by its Unicode code point in
  lower-case hex, in a fixed width chosen by size:

  - ``-hh``       for code points below U+0100 (2 hex digits):   ``.`` -> ``-2e``
  - ``-uhhhh``    for U+0100 .. U+FFFF (``u`` + 4 hex digits):  ``Ġ`` -> ``-u0120``
  - ``-Uhhhhhh``  for U+10000 .. U+10FFFF (``U`` + 6 hex digits)

  ``u`` and ``U`` are not hex digits, so the three forms cannot be confused.
* The empty token (no vocabulary has one, but the function is total) encodes to ``-``.

Examples: ``##ing`` -> ``-23-23ing``, ``a.b`` -> ``a-2eb``, ``_x`` -> ``-5fx``,
``" "`` -> ``-20``, ``Ġthe`` -> ``-u0120the``, ``-`` -> ``-2d``.

Properties: keys use only ``[A-Za-z0-9uU-]`` characters, so they never contain ``.``,
never start with ``_`` and are never empty; each character's encoding is prefix-free,
so the map is injective; ``decode_key`` is its exact inverse and accepts only canonical
keys (it re-encodes and compares), so every valid key has exactly one token.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from lr_opensearch.errors import QueryError

KEY_ENCODING = "lrk1"
"""Name of the key encoding; recorded in the bundle manifest and the index ``_meta``."""

_ESCAPE = "-"
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_ESCAPED = re.compile(r"-(?:u([0-9a-f]{4})|U([0-9a-f]{6})|([0-9a-f]{2}))")


def _escape_char(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"{_ESCAPE}{code:02x}"
    if code < 0x10000:
        return f"{_ESCAPE}u{code:04x}"
    return f"{_ESCAPE}U{code:06x}"


class _EscapeTable(dict):  # type: ignore[type-arg]
    """``str.translate`` table: safe characters map to themselves, others to escapes.

    Filled on demand (``__missing__``), so the whole of Unicode need not be enumerated.
    """

    def __missing__(self, code: int) -> str:
        char = chr(code)
        value = char if char in _SAFE else _escape_char(char)
        self[code] = value
        return value


_TABLE = _EscapeTable()


def encode_key(token: str) -> str:
    """Encode a vocabulary token as an engine-safe sparse feature name (scheme ``lrk1``).

    Args:
        token: any string (a tokenizer vocabulary entry).

    Returns:
        A non-empty key made of ``[A-Za-z0-9uU-]`` characters: no ``.``, no leading
        ``_``. Plain ASCII alphanumeric tokens are returned unchanged.
    """
    if token.isascii() and token.isalnum():
        return token
    if not token:
        return _ESCAPE
    return token.translate(_TABLE)


def encode_keys(tokens: Iterable[str]) -> list[str]:
    """Encode many tokens (e.g. a whole vocabulary, in id order)."""
    return [encode_key(t) for t in tokens]


def _decode_match(match: re.Match[str]) -> str:
    return chr(int(next(g for g in match.groups() if g is not None), 16))


def decode_key(key: str) -> str:
    """Invert :func:`encode_key` exactly.

    Args:
        key: a key produced by :func:`encode_key`.

    Returns:
        The original token.

    Raises:
        QueryError: if ``key`` is not a canonical ``lrk1`` key (stray characters, a
            malformed or non-canonical escape, a code point outside Unicode).
    """
    if key.isascii() and key.isalnum():
        return key
    if key == _ESCAPE:
        return ""
    try:
        token = _ESCAPED.sub(_decode_match, key)
    except ValueError as exc:  # chr() of a value above U+10FFFF
        raise QueryError(f"not an {KEY_ENCODING} sparse key: {key!r} ({exc})") from None
    if encode_key(token) != key:
        raise QueryError(
            f"not an {KEY_ENCODING} sparse key: {key!r}; keys hold only ASCII letters, "
            "digits and canonical '-' escapes (-hh, -uhhhh, -Uhhhhhh)"
        )
    return token
