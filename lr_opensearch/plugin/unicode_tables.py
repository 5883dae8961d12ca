"""The character classes of HF tokenizers' BERT pipeline, probed from the installed library,
as the Java source of ``BertTables`` (the plugin's tokenizer reads them).

The Rust tokenizer decides "control" (deleted by ``clean_text``), whitespace, punctuation
and non-spacing marks (deleted by ``strip_accents``) with its own crates' Unicode tables,
which are neither Python's ``unicodedata`` nor any JDK's (for example it keeps unassigned
code points that the JDK calls ``Cn``). So the plugin does not use the JDK's categories for
these: this module asks the installed ``tokenizers`` about every code point and writes the
answer as ranges. ``python -m lr_opensearch.plugin.unicode_tables`` rewrites the Java file;
tests/test_plugin_encoder.py checks it is current.

NFD and lower-casing are the JDK's (``java.text.Normalizer``, ``String.toLowerCase``); the
code points where they differ from the Rust crates are listed in docs/PLUGIN.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from tokenizers import normalizers, pre_tokenizers

TABLES_JAVA = (Path(__file__).resolve().parents[2] / "plugin" / "src" / "main" / "java" / "org"
               / "lightretriever" / "encode" / "BertTables.java")
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


def java_source(tables: dict[str, list[tuple[int, int]]]) -> str:
    """The generated ``BertTables.java`` (range starts and ends per class)."""
    import tokenizers

    head = ("// Generated by `python -m lr_opensearch.plugin.unicode_tables` from tokenizers "
            f"{tokenizers.__version__}; do not edit.\n"
            "package org.lightretriever.encode;\n\n"
            "/** Character classes of HF tokenizers' BERT pipeline as inclusive code point ranges "
            "(STARTS, ENDS). */\n"
            "final class BertTables {\n    private BertTables() {\n    }\n\n")
    arrays = [_java_array(f"{name}_{part}", [r[k] for r in rs])
              for name, rs in tables.items() for k, part in ((0, "STARTS"), (1, "ENDS"))]
    return head + "\n".join(arrays) + "}\n"


def main() -> None:
    """Rewrite ``BertTables.java`` from the installed tokenizers."""
    TABLES_JAVA.write_text(java_source(probe_tables()), encoding="utf-8")
    sys.stdout.write(f"wrote {TABLES_JAVA}\n")


if __name__ == "__main__":
    main()
