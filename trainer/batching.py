"""Turning sampled examples into model inputs (tokenization, framing, padding, counts).

Documents are tokenized and framed exactly as ingest does (``lr_opensearch.model
.tokenize_texts``). Queries are tokenized without special tokens, the way the query side
(``lr_opensearch.query``) does; the same ids feed the per-token dense pass, the sparse
count vector and, prefixed by the instruction, the symmetric teacher pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from lr_opensearch.errors import TrainingError
from lr_opensearch.model import instruction_ids, special_token_ids, tokenize_texts
from lr_opensearch.model.doc_encoder import padded
from lr_opensearch.model.framing import Framing, plain_tokenizer
from trainer.config import format_instruction
from trainer.data import Example


@dataclass
class Batch:
    """One micro-batch of B queries with G documents each.

    Attributes:
        doc_ids: [B*G, T] framed document ids, right-padded with 0.
        doc_mask: [B*G, T] 1 = real token.
        query_tokens: per query, its token ids (no special tokens, repeats kept).
        prompts: per query, the instruction prompt's ids (no special tokens).
        sym_ids: [B, Tq] framed ``prompt + query`` ids (the symmetric / teacher input).
        sym_mask: [B, Tq].
        counts: [B, V] token counts of each query (the sparse query vector).
        group: G.
        sources: per query, the data set it came from.
    """

    doc_ids: torch.Tensor
    doc_mask: torch.Tensor
    query_tokens: list[list[int]]
    prompts: list[list[int]]
    sym_ids: torch.Tensor
    sym_mask: torch.Tensor
    counts: torch.Tensor
    group: int
    sources: list[str]

    @property
    def size(self) -> int:
        return len(self.query_tokens)


def count_vectors(token_lists: Sequence[Sequence[int]], vocab_size: int) -> torch.Tensor:
    """[B, V] float32 counts of each query's tokens (repeats counted)."""
    counts = torch.zeros(len(token_lists), vocab_size, dtype=torch.float32)
    for i, toks in enumerate(token_lists):
        idx = torch.tensor(list(toks), dtype=torch.long)
        counts[i].index_add_(0, idx, torch.ones(len(toks)))
    return counts


class Collator:
    """Examples -> Batch for one backbone.

    Args:
        tokenizer: the backbone's ``tokenizers.Tokenizer``.
        framing: the model's framing (``model.framing``).
        vocab_size: width of the sparse vectors (``model.vocab_size``).
        max_length: document tokens, special tokens included.
        query_max_tokens: query tokens kept.
    """

    def __init__(self, tokenizer, framing: Framing, vocab_size: int, max_length: int,
                 query_max_tokens: int):
        self.tokenizer = plain_tokenizer(tokenizer)
        self.framing = framing
        self.vocab_size = vocab_size
        self.max_length = max_length
        self.query_max_tokens = query_max_tokens
        self.specials = set(special_token_ids(tokenizer))
        self._prompt_cache: dict[str | None, list[int]] = {}

    def prompt_ids(self, instruction: str | None) -> list[int]:
        """Ids of the formatted instruction prompt (cached; [] for no instruction)."""
        if instruction not in self._prompt_cache:
            self._prompt_cache[instruction] = instruction_ids(self.tokenizer, format_instruction(instruction))
        return self._prompt_cache[instruction]

    def query_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Query token ids as the query side makes them: no special tokens, truncated."""
        encs = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [[t for t in e.ids if t not in self.specials][: self.query_max_tokens] for e in encs]

    def __call__(self, examples: Sequence[Example]) -> Batch:
        """Collate; queries that tokenize to nothing are dropped with their documents."""
        tokens = self.query_ids([e.query for e in examples])
        kept = [(e, t) for e, t in zip(examples, tokens, strict=True) if t]
        if not kept:
            raise TrainingError("every query of the micro-batch tokenizes to nothing; check the data")
        group = len(kept[0][0].docs)
        if any(len(e.docs) != group for e, _ in kept):
            raise TrainingError("examples of one batch must have the same number of documents")
        docs = [d for e, _ in kept for d in e.docs]
        doc_rows, _ = tokenize_texts(self.tokenizer, docs, self.framing, self.max_length)
        doc_ids, doc_mask = padded(doc_rows)
        prompts = [self.prompt_ids(e.instruction) for e, _ in kept]
        sym_rows = [self.framing.frame([*p, *t])[0] for p, (_, t) in zip(prompts, kept, strict=True)]
        sym_ids, sym_mask = padded(sym_rows)
        query_tokens = [t for _, t in kept]
        return Batch(doc_ids=doc_ids, doc_mask=doc_mask, query_tokens=query_tokens,
                     prompts=prompts, sym_ids=sym_ids, sym_mask=sym_mask,
                     counts=count_vectors(query_tokens, self.vocab_size), group=group,
                     sources=[e.source for e, _ in kept])
