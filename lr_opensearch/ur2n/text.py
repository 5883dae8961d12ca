"""How UR²N frames text: templates with slots, tokenized once, with the slot's tokens marked.

A template (``"Query: {text}"``, ``"Query: {query} Document: {document} Relevant:"``) is
filled and tokenized as one string, so every token is the one the model would see in
context; the tokenizer's character offsets then tell which tokens belong to a slot. Token
embeddings keep only the slot's tokens (the template's words and the special tokens are
dropped), and a slot that does not fit ``max_length`` loses its last tokens (the template
around it is kept whole: the reranker must still read ``Relevant:``).

Needs only ``tokenizers``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tokenizers import Tokenizer

from lr_opensearch.errors import ConfigError, QueryError
from lr_opensearch.model.framing import plain_tokenizer, tokenizer_framing
from lr_opensearch.ur2n.bundle import render_template


@dataclass(frozen=True)
class Framed:
    """One framed sequence: token ids and, per position, whether it is a slot token."""

    ids: list[int]
    in_slot: list[bool]


def frame_template(tokenizer: Tokenizer, template: str, values: Mapping[str, str], slot: str,
                   max_length: int, *, suffix: bool) -> Framed:
    """Tokenize ``template`` filled with ``values``; mark and, if needed, cut ``slot``'s tokens.

    Args:
        tokenizer: the backbone's tokenizer (its padding / truncation settings are ignored).
        template: a template whose slots are the keys of ``values``.
        values: slot name -> text.
        slot: the slot whose tokens are marked and truncated to fit.
        max_length: the framed length limit (special tokens included).
        suffix: add the tokenizer's own suffix (T5's ``</s>``); a decoder's rerank prompt
            must end at ``Relevant:``, so causal LMs get only the prefix (BOS, if any).

    Raises:
        QueryError: the template and the other slots alone exceed ``max_length``.
    """
    plain = plain_tokenizer(tokenizer)
    text, spans = render_template(template, values)
    enc = plain.encode(text, add_special_tokens=False)
    start, end = spans[slot]
    inside = [e > start and s < end and e > s for s, e in enc.offsets]
    pre, post = tokenizer_framing(tokenizer)
    post = post if suffix else ()
    budget = max_length - len(pre) - len(post) - (len(enc.ids) - sum(inside))
    if budget < 0 or (budget == 0 and any(inside)):
        raise QueryError(f"the {slot!r} text does not fit: the template {template!r} and the other "
                         f"slots take {len(enc.ids) - sum(inside)} of {max_length} tokens; shorten "
                         "the query or raise max_length")
    ids: list[int] = list(pre)
    mask: list[bool] = [False] * len(pre)
    kept = 0
    for token, flag in zip(enc.ids, inside, strict=True):
        if flag:
            if kept == budget:
                continue
            kept += 1
        ids.append(token)
        mask.append(flag)
    return Framed(ids + list(post), mask + [False] * len(post))


def answer_token_id(tokenizer: Tokenizer, word: str, kind: str) -> int:
    """The token a model emits first when it answers ``word`` (``true`` / ``false``).

    A causal LM continues ``... Relevant:`` with ``" true"`` (a leading space); T5's
    decoder starts fresh with ``"true"`` (monoT5's ``▁true``).
    """
    ids = plain_tokenizer(tokenizer).encode(word if kind == "t5" else " " + word,
                                            add_special_tokens=False).ids
    if not ids:
        raise ConfigError(f"the tokenizer turns the answer {word!r} into no tokens; pass "
                          "true_token_id / false_token_id explicitly")
    return int(ids[0])


def pad_batch(framed: Sequence[Framed], pad_id: int) -> tuple[list[list[int]], list[list[int]], list[list[bool]]]:
    """Right-pad framed sequences: (ids, attention mask, slot mask), all [B, T_max]."""
    width = max(len(f.ids) for f in framed)
    ids = [f.ids + [pad_id] * (width - len(f.ids)) for f in framed]
    attn = [[1] * len(f.ids) + [0] * (width - len(f.ids)) for f in framed]
    slot = [f.in_slot + [False] * (width - len(f.ids)) for f in framed]
    return ids, attn, slot
