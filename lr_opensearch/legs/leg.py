"""What a leg is: :class:`Leg`, the per-query inputs legs search with, :class:`LegContext`.
The registry of legs is :mod:`lr_opensearch.legs.registry`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

# The inputs the query side makes for every query (other legs may name new ones).
QUERY_VECTOR = "query_vector"  #: [served_dim] float32: the mean of the query's table rows
TOKEN_WEIGHTS = "token_weights"  #: {encoded key: weight}: the query's sparse token weights
QUERY_TEXT = "query_text"  #: the query text, analysed by the engine
FULL_QUERY_VECTOR = "full_query_vector"  #: [served_dim]: the full model's query embedding
ENCODED_INPUTS = (QUERY_VECTOR, TOKEN_WEIGHTS)  #: what QueryEncoder makes (one encode call)

HYBRID = "hybrid"  #: the search mode that fuses the legs (the others search one leg alone)


class SubQueryBuilder(Protocol):
    """The engine adapter methods a leg's ``sub_query`` may call (see ``EngineAdapter``)."""

    def dense_query(self, vector: Any, *, knn_depth: int, filter: Any = None,
                    ef_search: int | None = None) -> dict[str, Any]: ...

    def sparse_query(self, sparse: Mapping[str, float], *, filter: Any = None,
                     knn_depth: int | None = None, seismic: Any = None) -> dict[str, Any]: ...

    def text_query(self, text: str, *, filter: Any = None,
                   fields: tuple[str, ...] | None = None) -> dict[str, Any]: ...


class ClusterSubQueryBuilder(SubQueryBuilder, Protocol):
    """An adapter of a cluster that encodes queries itself (OpenSearch with ml-commons)."""

    def neural_query(self, text: str, *, model_id: str | None, knn_depth: int,
                     filter: Any = None,
                     ef_search: int | None = None) -> dict[str, Any]: ...

    def neural_sparse_query(self, text: str, *, model_id: str | None,
                            filter: Any = None) -> dict[str, Any]: ...


@dataclass(frozen=True)
class LegContext:
    """What a sub-query needs besides the query's input: ``knn_depth`` (the nearest
    neighbours a knn, or an approximate sparse search, collects: the engines' knn ``k``; a
    search's ``k`` is its page size, :class:`~lr_opensearch.search.request.SearchOptions`), the
    caller's filter, HNSW ``ef_search``, the SEISMIC knobs of an index whose sparse field
    has the ``sparse_vector`` layout (``lr_opensearch.engine.seismic.SeismicSearch``), and
    the query's shape: ``sparse_tokens`` (send only the query's that many heaviest sparse
    tokens; None: all) and ``text_fields`` (the fields BM25 searches; None: title and
    text). Fewer clauses let the engine skip more (the ``calibrated`` fusion's shape)."""

    knn_depth: int
    filter: Any = None
    ef_search: int | None = None
    seismic: Any = None
    sparse_tokens: int | None = None
    text_fields: tuple[str, ...] | None = None


def _same(score: float) -> float:
    return score


@dataclass(frozen=True)
class Leg:
    """One fusable search.

    Attributes:
        name: the leg's name (weights, ``--mode``, reports, ``Hit.scores`` keys).
        label: how people see it ("LR dense").
        input: the per-query input it searches with (see the module docstring).
        needs: what that input is, for errors ("dense query vectors").
        sub_query: ``(adapter, input value, LegContext) -> engine sub-query``.
        default_weight: weight in new bundles (0: not searched unless weighted).
        score: engine score -> the score shown (``Hit.scores``, explain).
        engine_score: the inverse of ``score``: a score shown -> the engine's (the weight
            sweep of ``lr eval`` re-fuses one-leg runs as the server would).
        score_label: what the score shown is, where that is not obvious ("ip").
        run: the name of its one-leg run in ``lr eval`` ("lr-dense").
        in_cluster: ``(adapter, query text, LegContext, model id or None) -> sub-query``:
            the leg searched with the text alone, the cluster encoding it (``lr models
            deploy``; None: the leg cannot be encoded in the cluster). The model is the one
            deployed for the leg's input (None: the search pipeline's enricher names it).
        baseline: the leg others are compared with (the inspector's rank changes).
        reference_for: the leg whose query this one computes with the full model instead
            (the ``full-hybrid`` reference run swaps it in).
        linear_reads_score: the ``linear`` semantics normalises ``score(engine score)``
            instead of the engine score (the reference fuses raw inner products).
    """

    name: str
    label: str
    input: str
    needs: str
    sub_query: Callable[[SubQueryBuilder, Any, LegContext], dict[str, Any]]
    default_weight: float = 0.0
    score: Callable[[float], float] = _same
    engine_score: Callable[[float], float] = _same
    score_label: str = ""
    run: str = ""
    in_cluster: Callable[[ClusterSubQueryBuilder, str, LegContext, str | None],
                         dict[str, Any]] | None = None
    baseline: bool = False
    reference_for: str | None = None
    linear_reads_score: bool = False
