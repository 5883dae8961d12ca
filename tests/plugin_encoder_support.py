"""Running the plugin's Java encoder (``EncodeMain``) beside the Python ``QueryEncoder``.

Import from tests as ``from plugin_encoder_support import ...``.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lr_opensearch.errors import QueryError
from lr_opensearch.plugin.artifact import write_parts
from lr_opensearch.plugin.javac import encode_main_command

# Odd texts: quotes, accents, CJK, emoji, controls, zero-width, caps, scripts, added tokens.
ODD_TEXTS = [
    'He said "hello" and \'bye\'', "\u201ccurly quotes\u201d and \u2018single\u2019 \u201eGerman\u201f",
    "na\u00efve caf\u00e9 r\u00e9sum\u00e9 \u00c5ngstr\u00f6m", "Cr\u00e8me br\u00fbl\u00e9e \u00e0 la fa\u00e7on",
    "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3067\u3059", "\u4e2d\u6587\u68c0\u7d22\u7cfb\u7edf",
    "\ud55c\uad6d\uc5b4 \uacbd\uacc4\uce35", "mixed\u65e5\u672cenglish\u4e2d\u6587",
    "emoji \U0001f600 rocket \U0001f680 heart \u2764\ufe0f", "a\U0001f600b \U0001f97a\U0001f9e0",
    "skin \U0001f44d\U0001f3fd flag \U0001f1e9\U0001f1ea coder \U0001f9d1\u200d\U0001f4bb",
    "control\x00chars\x01\x02\x1f here\x7f", "tab\tnew\nline\rcr", "zero\u200bwidth\u200cjoin\u200dtext",
    "\ufeffbom start", "soft\u00adhyphen", "\x85next\x0bvt\x0cff\x1cfs\x1dgs", "\u2028line\u2029para",
    "state-of-the-art well-known end-to-end", "x" + "-y" * 300, "em\u2014dash en\u2013dash \u2026",
    "1,000,000 3.14159 1e-5 10% $5.00 #42 2024-01-01 12:30 \u00bd \u00b2",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u03a3\u03af\u03c3\u03c5\u03c6\u03bf\u03c2 \u039f\u0394\u039f\u03a3",
    "\u043f\u043e\u0433\u0440\u0430\u043d\u0438\u0447\u043d\u044b\u0439 \u0441\u043b\u043e\u0439 \u041c\u043e\u0441\u043a\u0432\u0430",
    "\u0637\u0628\u0642\u0629 \u062d\u062f\u064a\u0629 \u0627\u0644\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u0651\u0629",
    "\u05e9\u05dc\u05d5\u05dd \u0930\u0947\u0916\u093e \u0e02\u0e2d\u0e1a\u0e40\u0e02\u0e15",
    "e\u0301te\u0301 a\u0308\u0304 Z\u0351\u0352\u0353 o\u0337", "non\u00a0breaking\u202fnarrow\u2007figure",
    "ideographic\u3000space\u2003em", "[CLS]", "[CLS] what is it [SEP]", "a[MASK]b [PAD]", "[cls] lower [Sep]",
    "[UNK] unknown", "\u0130stanbul \u01c5 \u00df \u1e9e \u0149 \u212a", "\u03a3 final sigma \u039f\u0394\u039f\u03a3",
    "\ufb01 ligature \ufb00 \u2126", "\uff26\uff35\uff2c\uff2c\uff37\uff29\uff24\uff34\uff28 \uff54\uff45\uff58\uff54",
    "\u2460\u2461\u2462 \u216b", "private \ue000 use \U000f0000", "unassigned \u0378 and \U000e0001 tag",
    "replacement \ufffd char", "math \U0001d400\U0001d401 \U0001d518\U0001d52b music \U0001d11e",
    "CJK ext B \U00020000\U00020001 compat \uf900\uf901 ext \U0002b81f\U0002b820\U0002b920",
    "tilde~pipe|caret^backtick`", "email me@x.com http://a.b/c?d=e&f", "C++ C# .NET node.js",
    "don't won't it's", "__init__ self._x", "ALL CAPS QUERY", "MiXeD CaSe", "\u03b1\u03b2\u03b3 \u0391\u0392\u0393",
    "supercalifragilisticexpialidocious" * 3, "w" + "a" * 99, "w" + "a" * 100, "the of and to a in",
    "what is the boundary layer?", "?!.,;:", "\u00bfQu\u00e9? \u00a1S\u00ed!", "\u300c\u5f15\u7528\u300d\u3001\u3002",
    "", "   ", "\t\n ", ".", "\u200b", "bad \ud800 surrogate", "\udfff", "\U0001f600" * 30,
    "boundary " * 700, "word " * 20000, "a" * 100_000, "layer" + "\u00e9" * 30_000,
    "Dives Akuru \U00011938 Tulu \U00011383 Todhri \U000105c9 \ua7cb\u2c2f\U00010570",
    "marks a\u0301\u0316\u0323 x\U0001d16d\U0001d165 \U0001d15f\U0001d16e\U0001d166 \u0e01\u0e49\u0e38",
    "hangul \uac00\ud7a3 \u1100\u1161 jamo", "x\U0001f600y x\U0001f600\U0001f600 \U0001d11e!",
]


@dataclass
class Comparison:
    """What one run of the two encoders agreed on."""

    texts: int = 0
    refused_both: int = 0
    ids_equal: int = 0
    sparse_equal: int = 0
    dense_bitwise: int = 0
    min_cosine: float = 1.0
    max_abs_diff: float = 0.0
    failures: list[str] = field(default_factory=list)


def java_encode(parts: dict[str, bytes], texts: list[str], work: Path,
                *options: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run EncodeMain on ``parts``: (its header line, one result per text)."""
    directory = write_parts(parts, work / "parts")
    stdin = "".join(json.dumps(t) + "\n" for t in texts)
    run = subprocess.run([*encode_main_command(directory), *options], input=stdin, capture_output=True,
                         text=True, check=False, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(lines) == len(texts) + 1, (len(lines), len(texts))
    return lines[0], lines[1:]


def compare(encoder: Any, texts: list[str], results: list[dict[str, Any]]) -> Comparison:
    """Compare each Java result with ``encoder.encode`` of the same text."""
    out = Comparison(texts=len(texts))
    for text, got in zip(texts, results, strict=True):
        label = repr(text[:40])
        try:
            want = encoder.encode(text)
        except QueryError:
            if "error" in got:
                out.refused_both += 1
            else:
                out.failures.append(f"{label}: Python refused it, Java encoded {got['ids'][:10]}")
            continue
        if "error" in got:
            out.failures.append(f"{label}: Java refused it ({got['error']}), Python encoded it")
            continue
        if got["ids"] == want.token_ids.tolist():
            out.ids_equal += 1
        else:
            out.failures.append(f"{label}: ids {got['ids'][:12]} != {want.token_ids.tolist()[:12]}")
        if got["sparse"] == want.sparse:
            out.sparse_equal += 1
        else:
            out.failures.append(f"{label}: sparse maps differ")
        dense = np.array(got["dense_bits"], dtype=np.int32).view(np.float32)
        ref = np.asarray(want.dense, dtype=np.float32)
        out.dense_bitwise += int(dense.tobytes() == ref.tobytes())
        if dense.shape == ref.shape:
            a, b = dense.astype(np.float64), ref.astype(np.float64)
            cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
            out.min_cosine = min(out.min_cosine, cos)
            out.max_abs_diff = max(out.max_abs_diff, float(np.abs(dense - ref).max()))
        else:
            out.failures.append(f"{label}: dense shape {dense.shape} != {ref.shape}")
    return out


def random_texts(n: int, seed: int) -> list[str]:
    """Seeded random texts: mostly ASCII words and punctuation, with Latin-1, general BMP,
    CJK, emoji and astral code points, controls and odd spaces mixed in (no surrogates)."""
    rng = np.random.default_rng(seed)
    pools = [
        list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789      .,;:!?'\"-()[]#"),
        [chr(c) for c in range(0xa0, 0x250)],
        [chr(c) for c in range(0x4e00, 0x4e80)] + [chr(c) for c in range(0x1f300, 0x1f700)],
        ["\x00", "\x01", "\t", "\n", "\x85", "\u200b", "\u00a0", "\u3000", "\ufeff", "\ufffd", "\u0301"],
    ]
    texts = []
    for _ in range(n):
        chars = []
        for _ in range(int(rng.integers(1, 60))):
            kind = int(rng.choice(5, p=[0.6, 0.15, 0.1, 0.05, 0.1]))
            if kind == 4:
                cp = int(rng.integers(0x80, 0x110000))
                chars.append(chr(cp) if not 0xD800 <= cp < 0xE000 else "x")
            else:
                pool = pools[kind]
                chars.append(pool[int(rng.integers(len(pool)))])
        texts.append("".join(chars))
    return texts
