"""The evaluation runs: index a BEIR corpus, search its test queries, score, report.

Runs (names as in the JSON report):

* ``bm25``: OpenSearch's own ``multi_match`` over title + text (same index).
* ``full-dense``: queries encoded by the bundle's full document encoder (the symmetric
  backbone, instruction + query through the one document forward), dense knn only: the
  quality ceiling LightRetriever's model-free queries are compared with.
* ``lr-dense`` / ``lr-sparse``: the bundle's query encoder, one side only.
* ``lr-hybrid``: the bundle's default legs, weights and semantics (new bundles: dense 0.4
  / sparse 0.2 / BM25 0.4, ``opensearch``), fusion path ``auto``; ``lr-hybrid-linear``:
  the same legs with the reference ``linear`` semantics; ``lr-hybrid-calibrated``: the
  same legs and weights as one ``bool`` query (``fusion="calibrated"``, the index's
  calibration, measured first when the index has none; its default query shape).
* ``lr-dense+sparse``, ``lr-dense+bm25``, ``lr-dense+sparse+bm25``: fixed legs with the
  weights of :data:`~lr_opensearch.evaluation.config.NAMED_HYBRIDS` (chosen on SciFact
  train queries).
* ``full-hybrid``: the reference: ``lr-hybrid``'s legs and weights with the full model's
  query vector in the dense leg (the ``full_dense`` leg); LR is reported as a share of it.

* ``bm25+rerank``, ``lr-hybrid+rerank``: that first stage's top ``rerank_depth`` (20)
  rescored by the reranker ``EvalConfig.reranker`` names: ``full`` (the bundle's full model)
  or ``ur2n`` (the UR²N bundle's true/false reranker).
* ``xtr``, ``xtr+rerank``: XTR retrieval over the UR²N token index (query token vectors from
  the UR²N model, :class:`~lr_opensearch.ur2n.xtr.XTRRetriever`), then the same model's
  reranker (always ``ur2n``: retrieve then rerank with one model).

QPS = queries / wall seconds of the whole run (encoding + ``_msearch`` + fusion) in
batches. Runs with a model at query time also report ``ms_per_query`` per stage
(``encode``: the UR²N query forward; ``rerank``; ``first_stage``: the rest). The weight
sweep re-fuses the one-leg runs of the bundle's hybrid legs client side as one leg's weight
goes 0..1 (``EvalConfig.sweep_leg``, default the first weighted leg; the others share the
rest in the bundle's proportions); it is for display only and never changes the defaults.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lr_opensearch import legs
from lr_opensearch.errors import ConfigError
from lr_opensearch.evaluation.beir import (
    Dataset,
    Run,
    compute_metrics,
    corpus_ids,
    load_beir,
    write_trec,
)
from lr_opensearch.evaluation.config import (
    CALIBRATED_RUN,
    HYBRID_RUN,
    LINEAR_RUN,
    NAMED_HYBRIDS,
    REFERENCE_RUN,
    EvalConfig,
    leg_runs,
)
from lr_opensearch.evaluation.model_runs import StageClock, model_searches
from lr_opensearch.evaluation.model_runs import hits_of as _hits
from lr_opensearch.options import CALIBRATED
from lr_opensearch.progress import progress_bar
from lr_opensearch.search.fusion import bundle_weights, fuse

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle
    from lr_opensearch.search.retriever import Retriever

logger = logging.getLogger(__name__)

SWEEP_WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))


def first_queries(dataset: Dataset, n: int | None) -> Dataset:
    """The dataset with its first ``n`` judged queries (file order) and their qrels only."""
    if n is None or n >= len(dataset.queries):
        return dataset
    if n < 1:
        raise ConfigError(f"max_queries must be >= 1, got {n}")
    keep = list(dataset.queries)[:n]
    return dataclasses.replace(dataset, queries={q: dataset.queries[q] for q in keep},
                               qrels={q: dataset.qrels[q] for q in keep if q in dataset.qrels})


def default_index_name(dataset: Dataset, bundle: Bundle) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", dataset.name.lower()).strip("-") or "dataset"
    return f"lr-eval-{slug}-{bundle.bundle_id[:10]}"


def ensure_indexed(client: Any, dataset: Dataset, bundle: Bundle, index: str, url: str | None) -> str:
    """Reuse ``index`` if it holds this bundle's encoding of the whole corpus; else ingest
    (into a new index, or one holding part of the corpus and nothing else: it resumes).

    Returns: "reused" or "ingested".

    Raises:
        BundleMismatchError: the index was built with another bundle.
        ConfigError: the index holds documents that are not the collection's (its scores
            would be wrong, and an evaluation never writes into it); nothing is written.
    """
    from lr_opensearch.engine.factory import make_adapter

    adapter = make_adapter(client)
    if adapter.index_exists(index):
        adapter.check_bundle(index, bundle)
        adapter.refresh(index)
        ids = corpus_ids(dataset)
        count, held = adapter.count(index), _held(adapter, index, ids)
        if count > held:
            _refuse_foreign(dataset, bundle, index, count, held)
        if held == len(ids):
            logger.info("reusing index %s (%d docs, bundle %s)", index, count, bundle.bundle_id)
            return "reused"
        logger.info("index %s has %d of the %d documents of %s: ingesting (resumes)", index,
                    held, len(ids), dataset.name)
    from lr_opensearch.indexing.config import ConnectionConfig, IngestConfig
    from lr_opensearch.indexing.run import run as ingest_run

    cfg = IngestConfig(
        corpus=str(dataset.corpus_path),
        bundle=str(bundle.path),
        index=index,
        connection=ConnectionConfig(url=url),
    )
    summary = ingest_run(cfg, client=client)
    logger.info("ingested %s into %s: %s", dataset.corpus_path, index, summary.counts)
    return "ingested"


HELD_BATCH = 2000  # ids per _mget when checking which corpus documents an index holds


def _held(adapter: Any, index: str, ids: Sequence[str]) -> int:
    """How many of ``ids`` the index holds (``_mget`` without sources, in batches)."""
    return sum(len(adapter.fetch_sources(index, ids[i : i + HELD_BATCH], False))
               for i in range(0, len(ids), HELD_BATCH))


def _refuse_foreign(dataset: Dataset, bundle: Bundle, index: str, count: int,
                    held: int) -> None:
    own = default_index_name(dataset, bundle)
    todo = (f"leave out --index to use lr eval's own index ({own}), or name a new one with "
            f"--index" if index != own else
            f"delete it (lr index delete {index}) so that lr eval builds it again, or name "
            "a new one with --index")
    raise ConfigError(
        f"index {index!r} holds {count - held} document(s) that are not in the {dataset.name} "
        f"corpus ({count} in all, {held} of the corpus): an evaluation never writes into an "
        f"index holding other documents, and scores over it would be wrong; nothing was "
        f"written. To evaluate, {todo}")


def ensure_calibrated(client: Any, bundle: Bundle, index: str) -> None:
    """Calibrate ``index`` if its ``_meta`` holds no calibration (an index ingested before
    calibrations existed)."""
    from lr_opensearch.engine.factory import make_adapter
    from lr_opensearch.search.calibration import CALIBRATION_KEY, calibrate

    adapter = make_adapter(client)
    if not adapter.meta_value(index, CALIBRATION_KEY):
        calibrate(adapter, index, bundle)


def _batched(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def timed_run(
    name: str,
    dataset: Dataset,
    batch_size: int,
    search: Callable[[list[str]], list[list[tuple[str, float]]]],
) -> tuple[Run, float]:
    """Run ``search`` over the queries in batches; returns the run and the wall seconds."""
    qids = list(dataset.queries)
    run: Run = {}
    started = time.perf_counter()
    for chunk in progress_bar(
        _batched(qids, batch_size), desc=f"{dataset.name} {name}", unit="batch", leave=False
    ):
        results = search([dataset.queries[q] for q in chunk])
        for qid, hits in zip(chunk, results, strict=True):
            run[qid] = hits
    return run, time.perf_counter() - started


def run_searches(
    client: Any, bundle: Bundle, index: str, dataset: Dataset, config: EvalConfig,
    instruction: str | None = None, clocks: dict[str, StageClock] | None = None,
) -> dict[str, tuple[Run, float]]:
    """Every requested run: name -> (run, seconds); LR and full-model queries use the
    ``instruction`` table (None: the bundle's default). ``clocks`` (when given) gets a
    :class:`StageClock` per run with a model at query time."""
    from lr_opensearch.search import QueryEncoding, Retriever

    k = config.depth
    full = _FullQueries(bundle, instruction)
    retriever = Retriever(bundle, client, index, candidates=k, instruction=instruction,
                          encoding=QueryEncoding(input_encoders={legs.FULL_QUERY_VECTOR: full}))
    searches: dict[str, Callable[[list[str]], list[list[tuple[str, float]]]]] = {
        run: partial(_search, retriever, k, {"mode": leg}) for run, leg in leg_runs().items()}
    searches[HYBRID_RUN] = partial(_search, retriever, k, {})
    searches[LINEAR_RUN] = partial(_search, retriever, k, {"semantics": "linear"})
    searches[CALIBRATED_RUN] = partial(_search, retriever, k, {"fusion": CALIBRATED})
    for name, weights in NAMED_HYBRIDS.items():
        searches[name] = partial(_search, retriever, k, {"weights": weights})
    searches[REFERENCE_RUN] = partial(_search, retriever, k, {
        "weights": legs.reference_weights(bundle_weights(bundle.config))})
    if any(_needs_full(name) for name in config.runs):
        full.load()  # outside the timing
    clocks = clocks if clocks is not None else {}
    searches.update(model_searches(client, bundle, index, dataset, config, instruction, clocks))
    out = {}
    for name in config.runs:
        out[name] = timed_run(name, dataset, config.batch_size, searches[name])
        logger.info("%s %s: %.1f q/s", dataset.name, name, len(dataset.queries) / out[name][1])
    return out


def _needs_full(run: str) -> bool:
    return run == REFERENCE_RUN or leg_runs().get(run) in {
        n for n in legs.names() if legs.get(n).input == legs.FULL_QUERY_VECTOR}


def _search(retriever: Retriever, k: int, options: dict[str, Any],
            texts: list[str]) -> list[list[tuple[str, float]]]:
    return _hits(retriever.search_batch(texts, k, **options))


class _FullQueries:
    """The full model's query vectors (the reference legs' input), loaded once."""

    def __init__(self, bundle: Bundle, instruction: str | None):
        self.bundle, self.instruction = bundle, instruction
        self.encode: Callable[[list[str]], Any] | None = None

    def load(self) -> None:
        if self.encode is None:
            from lr_opensearch.model.full_model import full_query_encoder

            self.encode = full_query_encoder(self.bundle, self.instruction)

    def __call__(self, texts: list[str]) -> Any:
        self.load()
        assert self.encode is not None
        return self.encode(texts)


def weight_sweep(runs: Mapping[str, Run], weights: Mapping[str, float], swept: str,
                 qrels: dict[str, dict[str, int]], depth: int) -> dict[str, Any]:
    """nDCG@10 / R@100 of client fusion as leg ``swept``'s weight goes 0..1 (the other legs
    of ``weights`` share the rest, :func:`lr_opensearch.legs.move_weight`), both semantics, re-fusing the legs'
    one-leg runs (``runs``: leg -> run, scores as each leg reads them; the ``opensearch``
    semantics fuses them back as engine scores, ``Leg.engine_score``, as the server would).
    """
    for leg in (swept, *(n for n, v in weights.items() if v > 0.0)):
        if leg not in runs:
            raise ConfigError(f"the weight sweep needs the {legs.get(leg).run} run of leg {leg}")
    curves: dict[str, Any] = {"leg": swept, "weight": list(SWEEP_WEIGHTS)}
    for semantics in ("opensearch", "linear"):
        ndcg, recall = [], []
        for w in SWEEP_WEIGHTS:
            point = legs.move_weight(weights, swept, w)
            run: Run = {}
            for qid in qrels:
                lists = {}
                for leg in point:
                    hits = runs[leg].get(qid, [])
                    if semantics == "opensearch":
                        back = legs.get(leg).engine_score
                        hits = [(doc, back(s)) for doc, s in hits]
                    lists[leg] = hits
                fused = fuse(lists, weights=point, semantics=semantics, k=depth)
                run[qid] = [(h.doc_id, h.score) for h in fused]
            m = compute_metrics(qrels, run)
            ndcg.append(m["ndcg@10"])
            recall.append(m["recall@100"])
        curves[semantics] = {"ndcg@10": ndcg, "recall@100": recall}
    return curves


def plot_sweep(curves: dict[str, Any], path: Path, title: str, default_weight: float) -> Path:
    """A PNG of the sweep curves (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    label = legs.get(curves["leg"]).label
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for semantics, style in (("opensearch", "-o"), ("linear", "--s")):
        for metric in ("ndcg@10", "recall@100"):
            ax.plot(
                curves["weight"],
                curves[semantics][metric],
                style,
                markersize=3,
                label=f"{metric} ({semantics})",
            )
    ax.axvline(
        default_weight, color="grey", linestyle=":", label=f"default {default_weight} (not tuned)"
    )
    ax.set_xlabel(f"{label} weight (the other legs share the rest in the bundle's proportions)")
    ax.set_ylabel("score")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def evaluate(
    dataset_dir: str | Path,
    bundle: Bundle,
    client: Any,
    *,
    index: str | None = None,
    config: EvalConfig | None = None,
) -> dict[str, Any]:
    """Index (or reuse), run, score and report one dataset; see the module docstring."""
    config = config or EvalConfig()
    dataset = first_queries(load_beir(dataset_dir, config.split), config.max_queries)
    index = index or default_index_name(dataset, bundle)
    indexing = ensure_indexed(client, dataset, bundle, index, config.url)
    if CALIBRATED_RUN in config.runs:
        ensure_calibrated(client, bundle, index)
    from lr_opensearch.engine.factory import client_engine
    from lr_opensearch.instructions import dataset_instruction

    table, how = dataset_instruction(bundle.instructions, dataset.name, config.instruction)
    name = bundle.resolve_instruction(table)
    logger.info("%s: instruction %r (%s)", dataset.name, name, how)
    clocks: dict[str, StageClock] = {}
    results = run_searches(client, bundle, index, dataset, config, instruction=name,
                           clocks=clocks)
    report: dict[str, Any] = {
        "dataset": dataset.name,
        "queries": len(dataset.queries),
        "docs": dataset.n_docs,
        "split": config.split,
        "index": index,
        "engine": client_engine(client),
        "index_status": indexing,
        "bundle": str(bundle.path),
        "bundle_id": bundle.bundle_id,
        "weights": {leg: w for leg, w in bundle_weights(bundle.config).items() if w},
        "legs": [leg for leg, w in bundle_weights(bundle.config).items() if w],
        "semantics": bundle.config.fusion_semantics,
        "depth": config.depth,
        "max_queries": config.max_queries,
        "instruction": {"name": name, "prompt": bundle.instructions[name], "chosen_by": how},
        "runs": {},
    }
    if clocks:  # runs with a model at query time
        report["rerank"] = {"reranker": config.reranker, "depth": config.rerank_depth,
                            "ur2n_bundle": config.ur2n_bundle}
    for name, (run, seconds) in results.items():
        metrics = compute_metrics(dataset.qrels, run)
        report["runs"][name] = {
            **metrics,
            "qps": len(dataset.queries) / seconds,
            "seconds": seconds,
        }
        if name in clocks:
            report["runs"][name]["ms_per_query"] = clocks[name].per_query_ms(
                seconds, len(dataset.queries))
        if config.out_dir is not None:
            write_trec(config.out_dir / "runs" / f"{name}.trec", run, name)
    weights = bundle_weights(bundle.config)
    hybrid = [n for n, w in weights.items() if w > 0.0]  # never empty: weights are checked
    swept = config.sweep_leg or hybrid[0]
    leg_of = leg_runs()
    have = {leg_of[name]: run for name, (run, _) in results.items() if name in leg_of}
    needed = {*hybrid, swept}
    if config.sweep and len(needed) > 1 and needed <= have.keys():
        curves = weight_sweep(have, weights, swept, dataset.qrels, config.depth)
        report["sweep"] = curves
        if config.out_dir is not None:
            png = plot_sweep(curves, config.out_dir / "sweep.png",
                             f"{dataset.name}: weight sweep", weights.get(swept, 0.0))
            report["sweep_plot"] = str(png)
    if config.out_dir is not None:
        config.out_dir.mkdir(parents=True, exist_ok=True)
        (config.out_dir / "report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    return report
