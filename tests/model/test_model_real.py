"""The model code on the real packaged weights (MiniLM; SmolLM2 from GGUF is slow)."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer

from lr_opensearch.model import (
    LightRetrieverModel,
    RetrieverSettings,
    instruction_ids,
    tokenize_texts,
)
from lr_opensearch.model.framing import plain_tokenizer
from lr_opensearch.packaged import packaged_model_dir


def _encode(model: LightRetrieverModel, tok: Tokenizer, texts: list[str]) -> torch.Tensor:
    rows, _ = tokenize_texts(tok, texts, model.framing, 256)
    length = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), length, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for n, r in enumerate(rows):
        ids[n, : len(r)], mask[n, : len(r)] = torch.tensor(r), 1
    with torch.inference_mode():
        return model.encode_documents(ids, mask).dense


def test_packaged_minilm_matches_the_published_model() -> None:
    """Mean pooling + normalisation as sentence-transformers: cosine 0.7553 (MODELS.md)."""
    model_dir = packaged_model_dir()
    model = LightRetrieverModel.from_pretrained(model_dir,
                                                RetrieverSettings(normalize=None)).eval()
    assert (model.kind, model.pooling, model.normalize, model.head.kind) == (
        "encoder", "mean", True, "tied")
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    dense = _encode(model, tok, ["A man is eating food.", "A man is eating a piece of bread."])
    assert float(dense[0] @ dense[1]) == pytest.approx(0.7553, abs=2e-4)


@pytest.mark.slow
def test_smollm2_decoder_query_forward_and_table() -> None:
    """SmolLM2-135M (Llama, from GGUF): block-masked pass == independent passes == table rows."""
    from lr_opensearch.packaged.gguf import convert_gguf

    model_dir = convert_gguf()
    model = LightRetrieverModel.from_pretrained(model_dir).eval()
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    assert (model.kind, model.pooling, model.head.kind) == ("decoder", "last", "lm")
    instr = instruction_ids(tok, "Instruct: Given a web search query, retrieve relevant passages\nQuery: ")
    tokens = plain_tokenizer(tok).encode("capital of France", add_special_tokens=False).ids
    with torch.inference_mode():
        packed = model.encode_token_blocks(instr, [tokens])[0]
        table = model.token_table(instr, 48, batch_size=48, tokens_per_sequence=24, progress=False)

        def alone(t: int) -> torch.Tensor:
            x = torch.tensor([model.framing.frame([*instr, t])[0]])
            return model.encode_documents(x, torch.ones_like(x)).dense[0]

        diffs = [float((packed[k] - alone(t)).abs().max()) for k, t in enumerate(tokens)]
        diffs += [float((table[t] - alone(t)).abs().max()) for t in (0, 7, 30, 47)]
    scale = float(packed.abs().max())
    print(f"\nSmolLM2: max |packed or table - independent| = {max(diffs):.2e} (values up to {scale:.1f})")
    assert max(diffs) < 1e-4 * max(1.0, scale)


def test_encode_precisions_on_the_real_minilm() -> None:
    """The precisions of ``--encode-precision`` on the packaged MiniLM and 32 real ADI
    documents: the default (fp32, its projection screened in bfloat16 where that is fast)
    stores float32's vectors; mixed and bf16 stay within dense cosine 0.999 and keep
    nearly the same sparse terms (docs/RESULTS.md measures them on whole collections)."""
    import numpy as np
    from ingest_support import data_dir, read_corpus

    from lr_opensearch.indexing.reader import document_text
    from lr_opensearch.model import DocEncoder, DocSettings

    model_dir = packaged_model_dir()
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    docs = read_corpus(data_dir() / "adi" / "corpus.jsonl.gz", limit=32)
    texts = [document_text(d.get("title", ""), d["text"]) for d in docs]

    def encoder(precision: str) -> DocEncoder:
        model = LightRetrieverModel.from_pretrained(model_dir, RetrieverSettings(normalize=None))
        return DocEncoder(model, tok, DocSettings(max_length=256), device="cpu", precision=precision)

    plain = encoder("fp32")
    plain._exact_top = None  # float32 throughout
    want = plain.encode(texts)
    got = {p: encoder(p).encode(texts) for p in ("fp32", "mixed", "bf16")}
    np.testing.assert_array_equal(got["fp32"].dense, want.dense)
    for a, b in zip(got["fp32"].sparse, want.sparse, strict=True):
        assert a.keys() == b.keys() and all(abs(a[t] - b[t]) <= 1e-5 for t in b)

    def cosine(a: dict[int, float], b: dict[int, float]) -> float:
        dot = sum(w * b.get(t, 0.0) for t, w in a.items())
        return dot / float(np.linalg.norm(list(a.values())) * np.linalg.norm(list(b.values())))

    for precision in ("mixed", "bf16"):
        out = got[precision]
        dense = (out.dense * want.dense).sum(1)  # unit vectors (MiniLM normalises)
        assert dense.min() >= 0.999 and np.abs(out.dense - want.dense).max() > 0
        sparse = [cosine(a, b) for a, b in zip(out.sparse, want.sparse, strict=True)]
        assert min(sparse) >= 0.95 and float(np.mean(sparse)) >= 0.99, (precision, min(sparse))
