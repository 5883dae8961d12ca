"""Tiny randomly initialised retrievers (Llama-style decoder, BERT-style encoders) for tests.

Import from tests as ``from model_fixtures import ...`` (pytest puts tests/ on sys.path).
Tokenizers come from ``tiny_artifacts`` so model and tokenizer vocabularies agree.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_artifacts import SENTENCES, bpe_tokenizer, wordpiece_tokenizer
from tokenizers import Tokenizer
from transformers import BertConfig, LlamaConfig

from lr_opensearch.model import LightRetrieverModel, RetrieverSettings
from lr_opensearch.model.framing import plain_tokenizer


def llama_config(vocab_size: int, eos: int = 1, bos: int = 0) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=bos, eos_token_id=eos, pad_token_id=eos, tie_word_embeddings=True,
        architectures=["LlamaForCausalLM"])


def bert_config(vocab_size: int, architecture: str = "BertForMaskedLM") -> BertConfig:
    return BertConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=128, architectures=[architecture],
        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
        initializer_range=0.2)  # at BERT's 0.02 a tiny random model's output ignores its input


def tiny_llama(seed: int = 0, **kwargs: Any) -> tuple[LightRetrieverModel, Tokenizer]:
    """A 2-layer Llama with a byte-level BPE tokenizer that adds a BOS; eos from config."""
    tok = bpe_tokenizer(300)
    torch.manual_seed(seed)
    config = llama_config(tok.get_vocab_size(), eos=tok.token_to_id("<|end_of_text|>"),
                          bos=tok.token_to_id("<|begin_of_text|>"))
    model = LightRetrieverModel.from_config(config, RetrieverSettings(**kwargs), tokenizer=tok)
    return model.eval(), tok


def tiny_bert(seed: int = 0, architecture: str = "BertForMaskedLM",
              **kwargs: Any) -> tuple[LightRetrieverModel, Tokenizer]:
    """A 2-layer BERT (MLM head or bare encoder) with a WordPiece [CLS] ... [SEP] tokenizer."""
    tok = wordpiece_tokenizer(150)
    torch.manual_seed(seed)
    config = bert_config(tok.get_vocab_size(), architecture)
    model = LightRetrieverModel.from_config(config, RetrieverSettings(**kwargs), tokenizer=tok)
    return model.eval(), tok


def save_model_dir(model: LightRetrieverModel, tokenizer: Tokenizer, path: Path) -> Path:
    """An HF save_pretrained directory with tokenizer.json, as a real checkpoint has."""
    model.hf.save_pretrained(path)
    tokenizer.save(str(path / "tokenizer.json"))
    return path


def tiny_checkpoint_and_corpus(root: Path) -> tuple[Path, Path]:
    """A tiny BERT saved as a checkpoint directory, and a JSONL corpus of the test
    sentences to fit it on (``lr bundle build MODEL --fit-corpus CORPUS``)."""
    import json

    model, tok = tiny_bert()
    model_dir = save_model_dir(model, tok, root / "ckpt")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": str(i), "title": "", "text": s}) + "\n"
                              for i, s in enumerate(SENTENCES)))
    return model_dir, corpus


@pytest.fixture(autouse=False)
def one_thread() -> Iterator[None]:
    """Tiny models gain nothing from threads, and on a shared, busy CPU they thrash."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def query_tokens(tokenizer: Tokenizer, texts: list[str]) -> list[list[int]]:
    """Query token ids as the query side takes them: no special tokens, no padding."""
    plain = plain_tokenizer(tokenizer)
    return [plain.encode(t, add_special_tokens=False).ids for t in texts]
