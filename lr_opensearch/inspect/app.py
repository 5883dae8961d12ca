"""The inspector: LR hybrid and each leg's own list side by side for one query.

The page (``templates/inspect.html``) asks ``/api/search?q=...&<first leg>=W`` for JSON:
the fused list and one list per leg (top ``k``; the ``full_dense`` leg, the full model's query
vector searched densely, when the bundle's document encoder can run here), per hit each
leg's score and normalised score and the query tokens it matched (what ``lr search
--explain`` computes), each hybrid hit's rank in the baseline leg's (BM25's) list, and the
query's tokens with their sparse weight and share of the dense vector. The slider re-fuses
through the same client-side fusion as every other search: the first leg (LR dense) gets W,
the other legs share 1 - W in the bundle's proportions. Every error (empty query,
unknown index, another bundle's index, node down) comes back as ``{"error": message}`` and
the page shows the message.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from lr_opensearch import legs
from lr_opensearch.errors import LRError

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle
    from lr_opensearch.query import QueryEncoder
    from lr_opensearch.search import SearchOptions

logger = logging.getLogger(__name__)


def query_tokens(encoder: QueryEncoder, text: str) -> list[dict[str, Any]]:
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
                           "title": hit.title}
    if e is not None:
        out["legs"] = [{"name": name, "score": e.leg(name).score, "norm": e.leg(name).norm}
                       for name in e.legs]
        out["tokens"] = [{"token": t.token, "count": t.query_count, "weight": t.doc_weight,
                          "contribution": t.contribution} for t in e.top_tokens]
    return out


def full_model_available(bundle: Bundle) -> bool:
    """Whether the bundle's full document encoder can run here (torch and its weights)."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None and bool(bundle.manifest.get("doc_encoder"))


def create_app(bundle_path: str, index: str, *, url: str | None = None, engine: str = "auto",
               options: SearchOptions | None = None, client: Any = None,
               full: bool | None = None, slider: str | None = None) -> Any:
    """The Flask app for ``index`` searched with the bundle at ``bundle_path``: the fused
    list and one list per leg whose input can be made here (the ``full_dense`` leg's when the
    bundle's document encoder can run here, loaded on the first search; ``full`` forces
    it on or off). ``slider``: the leg whose weight the slider moves, the others sharing the
    rest (:func:`lr_opensearch.legs.move_weight`; None: the bundle's first weighted leg).
    ``options``: the searches' :class:`~lr_opensearch.search.SearchOptions` (``k`` hits a
    list, ``candidates`` a leg, ...), always fused in this process (``fusion="client"``)."""
    from flask import Flask, jsonify, render_template, request

    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.engine.client import connect
    from lr_opensearch.search import QueryEncoding, Retriever, SearchOptions
    from lr_opensearch.search.fusion import bundle_weights

    app = Flask(__name__)
    page_options = options or SearchOptions()
    k = page_options.k
    bundle = load_bundle(bundle_path)
    defaults = bundle_weights(bundle.config)
    slider = slider or next(name for name, w in defaults.items() if w > 0.0)
    legs.get(slider)  # an unknown leg: the registry's one-line error, before serving
    state: dict[str, Any] = {"retriever": None, "full_model": None}
    with_full = full_model_available(bundle) if full is None else full

    def full_vectors(texts: list[str]) -> Any:  # loaded on first use (torch)
        if state["full_model"] is None:
            from lr_opensearch.model.full_model import full_query_encoder

            state["full_model"] = full_query_encoder(bundle)
        return state["full_model"](texts)

    inputs = {legs.QUERY_VECTOR, legs.TOKEN_WEIGHTS, legs.QUERY_TEXT}
    if with_full:
        inputs.add(legs.FULL_QUERY_VECTOR)
    shown = [leg for leg in map(legs.get, legs.names()) if leg.input in inputs]

    def retriever() -> Any:  # made on first use, so a page with an error still loads
        if state["retriever"] is None:
            c = client if client is not None else connect(url, engine=engine)
            state["retriever"] = Retriever(
                bundle, c, index, page_options.replace(fusion="client"),
                encoding=QueryEncoding(input_encoders={legs.FULL_QUERY_VECTOR: full_vectors}))
        return state["retriever"]

    @app.get("/")
    def page() -> Any:
        return render_template("inspect.html", index=index, bundle=bundle.bundle_id,
                               bundle_path=str(bundle.path), slider=slider,
                               slider_label=legs.get(slider).label,
                               slider_weight=defaults.get(slider, 0.0), k=k,
                               lists=[(leg.name, leg.label) for leg in shown],
                               baseline_label=legs.baseline().label)

    @app.get("/api/search")
    def search() -> Any:
        text = request.args.get("q", "")
        try:
            weight = float(request.args.get(slider, defaults.get(slider, 0.0)))
        except ValueError:
            return jsonify({"error": f"{slider} weight {request.args.get(slider)!r} is not a "
                            "number"}), 400
        if not text.strip():
            return jsonify({"error": "type a query first: the query is empty"}), 400
        try:
            r = retriever()
            weights = legs.move_weight(defaults, slider, weight)
            lists = {legs.HYBRID: r.search(text, k=k, weights=weights, explain=True)}
            for leg in shown:
                lists[leg.name] = r.search(text, k=k, mode=leg.name, explain=True)
            tokens = query_tokens(r.encoder, text)
        except LRError as exc:
            logger.info("inspect: %s", exc)
            return jsonify({"error": str(exc)}), 400
        baseline = {h.doc_id: h.rank for h in lists.get(legs.baseline().name, [])}
        out = {mode: [_hit_json(h) for h in hits] for mode, hits in lists.items()}
        for hit in out[legs.HYBRID]:
            hit["baseline_rank"] = baseline.get(hit["id"])
        return jsonify({"query": text, "weights": weights, "lists": out, "tokens": tokens,
                        "engine": r.adapter.engine})

    return app
