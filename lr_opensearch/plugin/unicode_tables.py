"""HF tokenizers' BERT pipeline per code point, probed from the installed library, as the
Java source of ``BertTables`` (the plugin's tokenizer reads it).

The Rust tokenizer decides "control" (deleted by ``clean_text``), whitespace, punctuation,
non-spacing marks (deleted by ``strip_accents``), NFD and lower case with its own crates'
Unicode tables, which are neither Python's ``unicodedata`` nor any JDK's (it keeps
unassigned code points that the JDK calls ``Cn``; its NFD is older than JDK 25's and its
lower case newer than JDK 17's). So the plugin uses none of the JDK's Unicode data: this
module asks the installed ``tokenizers`` about every code point and writes the classes as
ranges and NFD / lower case as mappings (Hangul syllables decompose by the algorithm).
The canonical combining classes, which order marks within NFD and which the tokenizer does
not expose, come from Python's ``unicodedata``. ``python -m lr_opensearch.plugin.unicode_tables``
rewrites the Java file; tests/plugin/test_plugin_encoder.py checks that it is current and that
the Java normaliser and pre-tokenizer equal the tokenizer's on every code point.
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Callable, Iterator

from tokenizers import normalizers, pre_tokenizers

from lr_opensearch.plugin.javac import ENCODER_PACKAGE, PLUGIN_SRC

TABLES_JAVA = PLUGIN_SRC / ENCODER_PACKAGE / "BertTables.java"
_MARKER = "#"  # kept by every step, never the image of another code point under NFD/lowercase
_CHUNK = 8192


def _code_points() -> Iterator[list[str]]:
    """All Unicode scalar values (no surrogates, no marker), in chunks."""
    chunk: list[str] = []
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000 or chr(cp) == _MARKER:
            continue
        chunk.append(chr(cp))
        if len(chunk) == _CHUNK:
            yield chunk
            chunk = []
    yield chunk


def images(normalize: Callable[[str], str]) -> dict[str, str]:
    """{char: normalize(char)} for every code point but the marker, probed in chunks: the
    chunk's characters joined by the marker, normalised once, split at the marker."""
    out: dict[str, str] = {}
    for chunk in _code_points():
        parts = normalize(_MARKER + _MARKER.join(chunk) + _MARKER).split(_MARKER)[1:-1]
        if len(parts) != len(chunk):
            raise RuntimeError("a normaliser made or removed the marker; probe per character")
        out.update(zip(chunk, parts, strict=True))
    return out


def _pre_token_classes() -> tuple[set[int], set[int]]:
    """(whitespace, punctuation) code points of BertPreTokenizer: a whitespace character is
    in no word, a punctuation one is a word of its own (between two 'a's)."""
    pre = pre_tokenizers.BertPreTokenizer()
    space: set[int] = set()
    punct: set[int] = set()
    for chunk in _code_points():
        text = "a" + "a".join(chunk) + "a"
        covered = [False] * len(text)
        for word, (start, end) in pre.pre_tokenize_str(text):
            covered[start:end] = [True] * (end - start)
            if end - start == 1 and word != "a":
                punct.add(ord(word))
        space.update(ord(text[i]) for i in range(1, len(text), 2) if not covered[i])
    if pre.pre_tokenize_str("a#a") != [("a", (0, 1)), ("#", (1, 2)), ("a", (2, 3))]:
        raise RuntimeError("BertPreTokenizer no longer isolates '#'; update the probe")
    punct.add(ord(_MARKER))
    return space, punct


def probe_tables() -> dict[str, list[tuple[int, int]]]:
    """Inclusive code point ranges of each class, from the installed tokenizers."""
    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False,
                                       strip_accents=False, lowercase=False)
    cleaned = [ord(c) for c, img in images(clean.normalize_str).items() if img == ""]
    # BertNormalizer's strip_accents drops Mn only (normalizers.StripAccents drops Mc, Me too);
    # a character it deletes whole is Mn or decomposes into Mn only
    strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                       strip_accents=True, lowercase=False)
    marks = [ord(c) for c, img in images(strip.normalize_str).items() if img == ""]
    space, punct = _pre_token_classes()
    return {"CLEANED": ranges(cleaned), "WHITESPACE": ranges(space),
            "PUNCTUATION": ranges(punct), "NONSPACING_MARK": ranges(marks)}


def hangul_nfd(cp: int) -> list[int] | None:
    """The algorithmic NFD of a Hangul syllable (Unicode 3.12), None for other code points."""
    index = cp - 0xAC00
    if not 0 <= index < 11172:
        return None
    out = [0x1100 + index // 588, 0x1161 + (index % 588) // 28]
    return out + [0x11A7 + index % 28] if index % 28 else out


def probe_mappings() -> dict[str, dict[int, list[int]]]:
    """The tokenizer's NFD (Hangul syllables left to the algorithm) and lower-case mapping
    of every code point they change: code point -> code points."""
    nfd: dict[int, list[int]] = {}
    for c, img in images(normalizers.NFD().normalize_str).items():
        if img != c:
            cps = [ord(x) for x in img]
            hangul = hangul_nfd(ord(c))
            if hangul is None:
                nfd[ord(c)] = cps
            elif hangul != cps:
                raise RuntimeError(f"tokenizers' NFD of U+{ord(c):04X} is not the Hangul algorithm's")
    lower = {ord(c): [ord(x) for x in img]
             for c, img in images(normalizers.Lowercase().normalize_str).items() if img != c}
    return {"NFD": nfd, "LOWERCASE": lower}


def combining_classes() -> list[tuple[int, int, int]]:
    """(start, end, class) ranges of the non-zero canonical combining classes, from Python's
    ``unicodedata`` (the tokenizer exposes none; they only order marks within NFD)."""
    out: list[list[int]] = []
    for cp in range(0x110000):
        ccc = unicodedata.combining(chr(cp))
        if not ccc:
            continue
        if out and out[-1][1] == cp - 1 and out[-1][2] == ccc:
            out[-1][1] = cp
        else:
            out.append([cp, cp, ccc])
    return [(a, b, c) for a, b, c in out]


def ranges(code_points: list[int] | set[int]) -> list[tuple[int, int]]:
    """Sorted inclusive ranges covering exactly ``code_points``."""
    out: list[list[int]] = []
    for cp in sorted(code_points):
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return [(a, b) for a, b in out]


def _java_array(name: str, values: list[int]) -> str:
    rows = [", ".join(f"0x{v:x}" for v in values[i : i + 10]) for i in range(0, len(values), 10)]
    body = ",\n        ".join(rows)
    return f"    static final int[] {name} = {{\n        {body}\n    }};\n"


def _java_string(name: str, items: list[str]) -> str:
    """A String constant of ``;``-separated items, written 8 items to a source line."""
    rows = [";".join(items[i : i + 8]) for i in range(0, len(items), 8)]
    body = " +\n        ".join(f'"{row};"' for row in rows)
    return f"    static final String {name} =\n        {body};\n"


def java_source(tables: dict[str, list[tuple[int, int]]], mappings: dict[str, dict[int, list[int]]],
                ccc: list[tuple[int, int, int]]) -> str:
    """The generated ``BertTables.java``: class ranges as int arrays (STARTS, ENDS),
    mappings as ``cp:cp cp;...`` strings, combining classes as ``start-end:class;...``
    (hex code points)."""
    import tokenizers

    head = ("// Generated by `python -m lr_opensearch.plugin.unicode_tables` from tokenizers "
            f"{tokenizers.__version__} (combining classes: Unicode {unicodedata.unidata_version}); "
            "do not edit.\n"
            "package org.lightretriever.encode;\n\n"
            "/** HF tokenizers' BERT pipeline per code point: class ranges, NFD, lower case. */\n"
            "final class BertTables {\n    private BertTables() {\n    }\n\n")
    parts = [_java_array(f"{name}_{part}", [r[k] for r in rs])
             for name, rs in tables.items() for k, part in ((0, "STARTS"), (1, "ENDS"))]
    parts += [_java_string(name, [f"{cp:x}:" + " ".join(f"{x:x}" for x in img)
                                  for cp, img in sorted(mapping.items())])
              for name, mapping in mappings.items()]
    parts.append(_java_string("COMBINING_CLASS", [f"{a:x}-{b:x}:{c}" for a, b, c in ccc]))
    return head + "\n".join(parts) + "}\n"


def generate() -> str:
    """``BertTables.java`` as the installed tokenizers (and unicodedata) give it."""
    return java_source(probe_tables(), probe_mappings(), combining_classes())


def main() -> None:
    """Rewrite ``BertTables.java`` from the installed tokenizers."""
    TABLES_JAVA.write_text(generate(), encoding="utf-8")
    sys.stdout.write(f"wrote {TABLES_JAVA}\n")


if __name__ == "__main__":
    main()
