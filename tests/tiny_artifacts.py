"""Tiny tokenizers and bundles built in tests (no files from outside the test).

Import from tests as ``from tiny_artifacts import ...`` (pytest puts tests/ on sys.path).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from lr_opensearch.bundle import BundleConfig, save_bundle

SENTENCES = [
    "The capital of France is Paris.",
    "Paris is known for the Eiffel tower; the tower is tall.",
    "What is the boundary layer in supersonic flow?",
    "Heat transfer in a laminar boundary layer over a flat plate.",
    "Information retrieval systems rank documents for queries.",
    "Sparse and dense retrieval can be combined: hybrid search!",
    "a.b _x .. -- naïve café über Ελληνικά 日本語 don't it's",
    "Doctors treat patients; patients visit doctors in hospitals.",
]

BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
DATA = Path(__file__).resolve().parent / "data"


def wordpiece_tokenizer(vocab_size: int = 200, *, padding: bool = True) -> Tokenizer:
    """A BERT-like WordPiece tokenizer trained on SENTENCES, with [CLS]/[SEP] template.

    The trainer breaks frequency ties in hash order, so its vocabulary differs from one
    process to the next; the sizes the tests use are therefore trained once and kept in
    tests/data/wordpiece-<size>.json (``train_wordpiece`` rebuilds them).
    Padding and truncation are switched on (like MiniLM's tokenizer.json) so that users
    of the tokenizer must turn them off.
    """
    frozen = DATA / f"wordpiece-{vocab_size}.json"
    tok = Tokenizer.from_file(str(frozen)) if frozen.is_file() else train_wordpiece(vocab_size)
    if padding:
        tok.enable_padding(pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]", length=32)
        tok.enable_truncation(max_length=32)
    return tok


def train_wordpiece(vocab_size: int) -> Tokenizer:
    """Train the WordPiece tokenizer of :func:`wordpiece_tokenizer` (no padding)."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=BERT_SPECIALS,
                                       show_progress=False)
    tok.train_from_iterator(SENTENCES, trainer=trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return tok


def bpe_tokenizer(vocab_size: int = 400) -> Tokenizer:
    """A byte-level BPE tokenizer (GPT-2 / Llama-3 style) trained on SENTENCES, with a BOS."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(SENTENCES, trainer=trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)]
    )
    return tok


def tiny_config(dense_dim: int = 16, served_dim: int | None = None, **kw: object) -> BundleConfig:
    base: dict[str, object] = dict(
        backbone_name="tiny/test", architecture="BertModel", kind="encoder", pooling="mean",
        normalize=False, dense_dim=dense_dim, served_dim=served_dim or dense_dim,
        max_length=64, sparse_head="tied",
        # two legs, as the tests of dense + sparse fusion expect; BM25 legs ask for them
        weights={"dense": 0.7, "sparse": 0.3},
    )
    base.update(kw)
    return BundleConfig(**base)  # type: ignore[arg-type]


def random_tables(config: BundleConfig, vocab_size: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal((vocab_size, config.dense_dim)).astype(np.float32)
            for name in config.instructions}


def tiny_bundle(out: Path, tokenizer: Tokenizer | None = None, *, seed: int = 0,
                doc_encoder_dir: Path | None = None, **config_kw: object) -> Path:
    """Save a bundle with random tables for ``tokenizer`` (default: the WordPiece one)."""
    tok = tokenizer if tokenizer is not None else wordpiece_tokenizer()
    config = tiny_config(**config_kw)
    tables = random_tables(config, tok.get_vocab_size(with_added_tokens=True), seed)
    return save_bundle(out, config, tokenizer=tok, tables=tables, doc_encoder_dir=doc_encoder_dir)
