"""Tiny models and training data for the trainer tests (built in the test, no downloads).

Import from tests as ``from trainer_support import ...`` (pytest puts tests/ on sys.path).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tiny_artifacts import bpe_tokenizer, wordpiece_tokenizer

TOPICS = {
    "aero": "wing lift drag boundary layer supersonic flow plate heat transfer pressure shock",
    "library": "library documents retrieval queries classification catalog books index users search",
    "medicine": "doctors patients hospitals treatment disease clinical trial drug therapy cells",
    "city": "paris france capital tower eiffel city river museum tourists streets",
}
TINY_CONFIG = Path(__file__).resolve().parent.parent / "trainer" / "configs" / "tiny-cpu.yaml"


def tiny_bert_dir(root: Path, *, hidden: int = 32, seed: int = 0) -> Path:
    """A random 2-layer BERT (mean pooling, tied sparse head) saved with a WordPiece tokenizer."""
    import torch
    from transformers import BertConfig, BertModel

    out = root / "tiny-bert"
    if (out / "config.json").is_file():
        return out
    tok = wordpiece_tokenizer(300, padding=False)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=hidden, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=128,
                        pad_token_id=tok.token_to_id("[PAD]"))
    BertModel(config).save_pretrained(out)
    tok.save(str(out / "tokenizer.json"))
    return out


def tiny_llama_dir(root: Path, *, hidden: int = 32, seed: int = 0) -> Path:
    """A random 2-layer Llama (GQA, tied LM head) saved with a byte-level BPE tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = root / "tiny-llama"
    if (out / "config.json").is_file():
        return out
    tok = bpe_tokenizer(400)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, tie_word_embeddings=True,
                         bos_token_id=tok.token_to_id("<|begin_of_text|>"),
                         eos_token_id=tok.token_to_id("<|end_of_text|>"))
    LlamaForCausalLM(config).save_pretrained(out)
    tok.save(str(out / "tokenizer.json"))
    return out


def write_tiny_records(path: Path, n: int = 24, seed: int = 0) -> Path:
    """JSONL records: the query is a few words of a topic, the positive more words of it,
    the negatives text of the other topics."""
    rng = random.Random(seed)
    names = sorted(TOPICS)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            topic = names[i % len(names)]
            words = TOPICS[topic].split()
            others = [t for t in names if t != topic]
            rec = {
                "query": " ".join(rng.sample(words, 3)),
                "positives": [" ".join(rng.sample(words, 8))],
                "negatives": [" ".join(rng.sample(TOPICS[o].split(), 8)) for o in others],
            }
            f.write(json.dumps(rec) + "\n")
    return path


def tiny_overrides(model_dir: Path, records: Path, out: Path, **extra: object) -> list[str]:
    """--set overrides pointing the tiny config at a model, data and output folder."""
    items = [f"model.path={model_dir}", f"data.sources=[{{name: tiny, path: '{records}'}}]",
             f"run.output_dir={out}"]
    items += [f"{k}={v}" for k, v in extra.items()]
    return items
