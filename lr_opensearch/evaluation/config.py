"""What ``lr eval`` runs: the run names, which of them run by default, and
:class:`EvalConfig`. Imported by the runs (:mod:`~lr_opensearch.evaluation.runs`, the
first-stage ones; :mod:`~lr_opensearch.evaluation.model_runs`, those with a model at query
time), which never import each other's settings from anywhere else.

Run names come from the legs (:mod:`lr_opensearch.legs`): each leg's one-leg run
(``Leg.run``: ``lr-dense``, ``lr-sparse``, ``bm25``, ``full-dense``); ``lr-hybrid`` (the
bundle's legs and weights) and ``lr-hybrid-linear``; the fixed hybrids
``lr-<leg>+<leg>...`` (:data:`lr_opensearch.legs.builtin.FIXED_HYBRIDS`); ``full-hybrid``
(the same hybrid as ``lr-hybrid`` with the full model's query vector in the dense leg: the
reference LightRetriever is measured against); and, asked for by name, the runs with a
model at query time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lr_opensearch import legs
from lr_opensearch.errors import ConfigError
from lr_opensearch.legs.builtin import FIXED_HYBRIDS
from lr_opensearch.options import DEFAULT_EVAL_DEPTH, DEFAULT_RERANK_DEPTH

HYBRID_RUN = "lr-hybrid"
LINEAR_RUN = "lr-hybrid-linear"
# lr-hybrid's legs and weights as one bool query (fusion="calibrated": each leg boosted by
# weight / its scale measured on the index; the index is calibrated first if it is not)
CALIBRATED_RUN = "lr-hybrid-calibrated"
REFERENCE_RUN = "full-hybrid"
RERANK_SUFFIX = "+rerank"
XTR_RUN = "xtr"
RERANKERS = ("full", "ur2n")  # the +rerank runs' reranker: the LR bundle's full model, UR²N


def fixed_hybrid_name(weights: dict[str, float]) -> str:
    return "lr-" + "+".join(weights)


NAMED_HYBRIDS: dict[str, dict[str, float]] = {fixed_hybrid_name(w): w for w in FIXED_HYBRIDS}
MODEL_RUNS = (HYBRID_RUN + RERANK_SUFFIX, legs.baseline().run + RERANK_SUFFIX, XTR_RUN,
              XTR_RUN + RERANK_SUFFIX)


def leg_runs() -> dict[str, str]:
    """Each registered leg's one-leg run -> the leg: the baseline first, then the full-model
    reference, then the others in registry order (a leg registered later gets its run)."""
    ordered = sorted(map(legs.get, legs.names()),
                     key=lambda leg: (not leg.baseline, not leg.reference_for))
    return {leg.run: leg.name for leg in ordered if leg.run}


def run_names() -> tuple[str, ...]:
    """Every run ``lr eval`` knows."""
    return (*leg_runs(), HYBRID_RUN, LINEAR_RUN, CALIBRATED_RUN, *NAMED_HYBRIDS, REFERENCE_RUN,
            *MODEL_RUNS)


def default_runs() -> tuple[str, ...]:
    """The runs without a model at query time (the +rerank runs run a model on the top hits
    of every query, the xtr runs need a UR²N bundle and its token index: by name only)."""
    return tuple(n for n in run_names() if n not in MODEL_RUNS)


def parse_runs(text: str | Sequence[str] | None) -> list[str]:
    """``bm25,lr-hybrid`` -> validated run names (None: the defaults); errors list valid names."""
    if text is None:
        return list(default_runs())
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    bad = [n for n in names if n not in run_names()]
    if bad or not names:
        raise ConfigError(f"unknown run(s) {bad or names!r}; valid runs: {', '.join(run_names())}")
    return names


@dataclass(frozen=True)
class EvalConfig:
    """Settings of one ``lr eval`` run.

    runs: run names (see :func:`run_names`).
    depth: hits retrieved per query (R@100 needs 100).
    batch_size: queries per ``_msearch`` / encoder batch.
    out_dir: where report.json, runs/*.trec and sweep.png go (None: nothing written).
    sweep: compute the weight sweep (needs the one-leg runs of the bundle's weighted legs).
    sweep_leg: the leg whose weight the sweep moves (None: the bundle's first weighted leg).
    url: cluster URL given to ingest when the corpus must be indexed.
    instruction: the bundle's instruction (table) name for every query; None: the table
        named after the dataset if the bundle has one, else its default
        (:func:`lr_opensearch.instructions.dataset_instruction`).
    """

    runs: tuple[str, ...] = field(default_factory=default_runs)
    depth: int = DEFAULT_EVAL_DEPTH
    batch_size: int = 32
    out_dir: Path | None = None
    sweep: bool = True
    sweep_leg: str | None = None
    split: str = "test"
    url: str | None = None
    instruction: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    reranker: str = RERANKERS[0]  # the +rerank runs' reranker
    ur2n_bundle: str | None = None  # xtr runs and reranker ur2n
    token_index: str | None = None  # xtr runs; None: lr-tokens-<dataset>-<UR²N bundle id>
    rerank_depth: int = DEFAULT_RERANK_DEPTH  # hits a +rerank run rescores per query
    max_queries: int | None = None  # the first N judged queries only (file order): CPU budgets
