"""The inspector: LR hybrid, LR dense, LR sparse and BM25 side by side for one query.

The page (``templates/inspect.html``) asks ``/api/search?q=...&dense=W`` for JSON: the four
lists (top ``k``; a fifth, the full model's query vector searched densely, when the bundle's
document encoder can run here), per hit the raw and normalised scores of each leg and the query tokens it
matched (what ``lr search --explain`` computes), each hybrid hit's rank in BM25's list, and
the query's tokens with their sparse weight and share of the dense vector. The dense-weight
slider re-fuses through the same client-side fusion as every other search: the dense leg
gets W, the other legs share 1 - W in the bundle's proportions. Every error (empty query,
unknown index, another bundle's index, node down) comes back as ``{"error": message}`` and
the page shows the message.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from lr_opensearch.errors import LRError

logger = logging.getLogger(__name__)

MODES = ("hybrid", "dense", "sparse", "bm25")


def query_tokens(encoder: Any, text: str) -> list[dict[str, Any]]:
    """The query's distinct tokens: text, count, sparse weight (0 if dropped) and share of
    the dense vector (row . q / (n q . q), summing to 1 over the tokens)."""
    q = encoder.encode(text)
    ids = np.asarray(q.token_ids)
    rows = encoder.table()[ids].astype(np.float32)
    dense = np.asarray(q.dense, dtype=np.float32)
    denom = float(len(ids) * dense @ dense) or 1.0
    shares = rows @ dense / denom
    tokenizer = encoder.bundle.tokenizer
    out: dict[int, dict[str, Any]] = {}
    for i, share in zip(ids.tolist(), shares.tolist(), strict=True):
        entry = out.setdefault(i, {"token": tokenizer.id_to_token(i), "count": 0,
                                   "dense_share": 0.0, "sparse_weight": 0.0})
        entry["count"] += 1
        entry["dense_share"] += float(share)
    keys = encoder.key_array
    for i, entry in out.items():
        entry["sparse_weight"] = float(q.sparse.get(keys[i], 0.0))
    return sorted(out.values(), key=lambda e: -e["dense_share"])


def _hit_json(hit: Any) -> dict[str, Any]:
    e = hit.explanation
    out: dict[str, Any] = {"rank": hit.rank, "id": hit.doc_id, "score": hit.score,
                           "title": hit.title, "dense": hit.dense_score,
                           "sparse": hit.sparse_score}
    if e is not None:
        out.update(dense_norm=e.dense_norm, sparse_norm=e.sparse_norm, bm25=e.bm25_score,
                   bm25_norm=e.bm25_norm,
                   tokens=[{"token": t.token, "count": t.query_count, "weight": t.doc_weight,
                            "contribution": t.contribution} for t in e.top_tokens])
    return out


def split_weights(defaults: Mapping[str, float], dense: float) -> dict[str, float]:
    """Dense gets ``dense``; the other legs share the rest in the defaults' proportions."""
    dense = min(1.0, max(0.0, float(dense)))
    others = {leg: w for leg, w in defaults.items() if leg != "dense" and w > 0}
    total = sum(others.values())
    out = {"dense": dense}
    for leg, w in others.items():
        out[leg] = (1.0 - dense) * w / total if total else 0.0
    if not others:  # a dense-only bundle: the slider moves weight to the sparse leg
        out["sparse"] = 1.0 - dense
    return out


def full_model_available(bundle: Any) -> bool:
    """Whether the bundle's full document encoder can run here (torch and its weights)."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None and bool(bundle.manifest.get("doc_encoder"))


def create_app(bundle_path: str, index: str, *, url: str | None = None, engine: str = "auto",
               k: int = 10, candidates: int = 100, client: Any = None,
               full: bool | None = None) -> Any:
    """The Flask app for ``index`` searched with the bundle at ``bundle_path``; ``full``
    adds a fifth list, the dense search with the full model's query vector (default: when
    the bundle's document encoder can run here; loaded on the first search)."""
    from flask import Flask, jsonify, render_template, request

    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.options import LEGS
    from lr_opensearch.search import Retriever
    from lr_opensearch.search.client import connect
    from lr_opensearch.search.fusion import bundle_weights

    app = Flask(__name__)
    bundle = load_bundle(bundle_path)
    defaults = dict(zip(LEGS, bundle_weights(bundle.config), strict=True))
    state: dict[str, Any] = {"retriever": None, "full": None}
    with_full = full_model_available(bundle) if full is None else full

    def retriever() -> Any:  # made on first use, so a page with an error still loads
        if state["retriever"] is None:
            c = client if client is not None else connect(url, engine=engine)
            state["retriever"] = Retriever(bundle, c, index, fusion="client",
                                           candidates=candidates)
        return state["retriever"]

    @app.get("/")
    def page() -> Any:
        return render_template("inspect.html", index=index, bundle=bundle.bundle_id,
                               bundle_path=str(bundle.path), dense=defaults["dense"],
                               defaults=defaults, k=k, full=with_full)

    @app.get("/api/search")
    def search() -> Any:
        text = request.args.get("q", "")
        try:
            dense = float(request.args.get("dense", defaults["dense"]))
        except ValueError:
            return jsonify({"error": f"dense weight {request.args.get('dense')!r} is not a "
                            "number"}), 400
        if not text.strip():
            return jsonify({"error": "type a query first: the query is empty"}), 400
        try:
            r = retriever()
            weights = split_weights(defaults, dense)
            lists = {"hybrid": r.search(text, k=k, weights=weights, explain=True)}
            for mode in MODES[1:]:
                lists[mode] = r.search(text, k=k, mode=mode, explain=mode != "bm25")
            if with_full:
                if state["full"] is None:
                    from lr_opensearch.model.rerank import full_query_encoder

                    state["full"] = full_query_encoder(bundle)
                lists["full"] = r.search_encoded(state["full"]([text]), None, k, mode="dense",
                                                 texts=[text])[0]
            tokens = query_tokens(r.encoder, text)
        except LRError as exc:
            logger.info("inspect: %s", exc)
            return jsonify({"error": str(exc)}), 400
        bm25_rank = {h.doc_id: h.rank for h in lists["bm25"]}
        out = {mode: [_hit_json(h) for h in hits] for mode, hits in lists.items()}
        for hit in out["hybrid"]:
            hit["bm25_rank"] = bm25_rank.get(hit["id"])
        return jsonify({"query": text, "weights": weights, "lists": out, "tokens": tokens,
                        "engine": r.adapter.engine})

    return app
