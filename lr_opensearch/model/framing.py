"""How token sequences are framed with special tokens, for documents and query tokens alike.

One rule serves both sides, so that a query-table row is exactly "the document forward of
instruction + token":

- encoders: the tokenizer's own framing (``[CLS] ... [SEP]`` for BERT);
- decoders: the tokenizer's own prefix (BOS if it adds one) and an EOS at the end (the
  tokenizer's own suffix if it has one, else the model's ``eos_token_id``); last-token
  pooling then reads the EOS position, which has seen the whole sequence. A query token t
  is thus encoded as ``[bos] + instruction + [t, eos]`` and pooled at that EOS, the layout
  of the LightRetriever reference implementation.

This module needs only ``tokenizers`` (no torch), so data code can use it freely.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokenizers import Tokenizer

from lr_opensearch.errors import ConfigError

_PROBE = "hello"


@dataclass(frozen=True)
class Framing:
    """Special tokens around every encoded sequence.

    Attributes:
        prefix: ids placed before the content (e.g. ``(101,)`` for BERT's [CLS]).
        suffix: ids placed after the content (e.g. ``(102,)`` for [SEP], or EOS).
    """

    prefix: tuple[int, ...] = ()
    suffix: tuple[int, ...] = ()

    @property
    def overhead(self) -> int:
        return len(self.prefix) + len(self.suffix)

    def frame(self, content: Sequence[int], max_length: int | None = None) -> tuple[list[int], bool]:
        """Frame ``content``, truncating it so the result fits ``max_length``.

        Returns:
            (framed ids, whether the content was truncated).
        """
        budget = len(content) if max_length is None else max_length - self.overhead
        if budget < 1:
            raise ConfigError(f"max_length {max_length} leaves no room for content after "
                              f"{self.overhead} special tokens; use a larger max_length")
        truncated = len(content) > budget
        return [*self.prefix, *content[:budget], *self.suffix], truncated

    @classmethod
    def derive(cls, tokenizer: Tokenizer, kind: str, eos_token_id: int | None = None) -> Framing:
        """The framing for a backbone of ``kind`` ("encoder" | "decoder") with this tokenizer."""
        prefix, suffix = tokenizer_framing(tokenizer)
        if kind == "decoder" and not suffix:
            if eos_token_id is None:
                raise ConfigError("a decoder backbone needs an EOS token for last-token pooling: "
                                  "set eos_token_id in config.json")
            suffix = (int(eos_token_id),)
        elif kind not in ("encoder", "decoder"):
            raise ConfigError(f"unknown backbone kind {kind!r}; valid: 'encoder', 'decoder'")
        return cls(prefix=prefix, suffix=suffix)


def plain_tokenizer(tokenizer: Tokenizer) -> Tokenizer:
    """``tokenizer`` itself if it neither pads nor truncates, else a copy that does neither."""
    if tokenizer.padding is None and tokenizer.truncation is None:
        return tokenizer
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_padding()
    copy.no_truncation()
    return copy


def tokenizer_framing(tokenizer: Tokenizer) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The (prefix, suffix) special ids the tokenizer's post-processor adds to one sequence."""
    tok = plain_tokenizer(tokenizer)
    raw = tok.encode(_PROBE, add_special_tokens=False).ids
    full = tok.encode(_PROBE, add_special_tokens=True).ids
    for start in range(len(full) - len(raw) + 1):
        if full[start:start + len(raw)] == raw:
            return tuple(full[:start]), tuple(full[start + len(raw):])
    raise ConfigError("cannot tell which special tokens the tokenizer adds "
                      f"(probe {_PROBE!r}: {raw} vs {full})")


def special_token_ids(tokenizer: Tokenizer) -> list[int]:
    """Ids of the tokenizer's special tokens (never query terms, dropped from doc sparse)."""
    decoder = tokenizer.get_added_tokens_decoder()
    return sorted(int(i) for i, tok in decoder.items() if tok.special)


def tokenize_texts(
    tokenizer: Tokenizer, texts: Sequence[str], framing: Framing, max_length: int
) -> tuple[list[list[int]], list[bool]]:
    """Tokenize and frame documents the one way the doc encoder does.

    Args:
        tokenizer: the backbone's tokenizer (its own padding/truncation settings are ignored).
        texts: the documents.
        framing: from ``Framing.derive`` (or ``LightRetrieverModel.framing``).
        max_length: maximum framed length in tokens.

    Returns:
        (framed id lists, truncated flags), in input order.
    """
    tok = plain_tokenizer(tokenizer)
    encodings = tok.encode_batch(list(texts), add_special_tokens=False)
    ids, truncated = [], []
    for enc in encodings:
        framed, cut = framing.frame(enc.ids, max_length)
        ids.append(framed)
        truncated.append(cut)
    return ids, truncated


def instruction_ids(tokenizer: Tokenizer, instruction: str) -> list[int]:
    """Token ids of a query instruction, without special tokens (framing adds those)."""
    if not instruction:
        return []
    return plain_tokenizer(tokenizer).encode(instruction, add_special_tokens=False).ids
