"""BRIDGE-Embed on the real node (issue 19): a tiny model trained with the Medusa sparse side,
exported, ingested; the stored ``lr_sparse`` terms are the trained model's soft top-k."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from ingest_support import ingest_config, write_jsonl
from test_bridge_model import DOCS, expected_terms, train_bridge_bundle

from lr_opensearch.bundle import load_bundle
from lr_opensearch.bundle.keys import encode_key
from lr_opensearch.indexing.reader import document_text
from lr_opensearch.indexing.run import run

pytestmark = pytest.mark.node


def test_export_ingest_stores_the_trained_top_k(tmp_path: Path, os_client: Any,
                                                opensearch_url: str, index_name: str) -> None:
    path, trainer = train_bridge_bundle(tmp_path, top_k=10)
    bundle = load_bundle(path)
    records = [{"_id": f"d{i}", "title": "", "text": text} for i, text in enumerate(DOCS)]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records)
    summary = run(ingest_config(corpus, path, index_name, opensearch_url, tmp_path / "state"))
    assert summary.complete and summary.counts.indexed == len(DOCS)
    want = expected_terms(trainer, [document_text("", t) for t in DOCS], 10)
    for rec, terms in zip(records, want, strict=True):
        stored = os_client.get(index=index_name, id=rec["_id"])["_source"]["lr_sparse"]
        expected = {encode_key(bundle.tokenizer.id_to_token(t)): w for t, w in terms.items()}
        assert set(stored) == set(expected) and len(stored) == 10
        for key, w in expected.items():
            assert math.isclose(stored[key], w, rel_tol=1e-4)
