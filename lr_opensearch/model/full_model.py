"""The bundle's full model at query time (ONNX Runtime or torch, ``model.runtime``): its query vectors (the baseline the LR
table replaces: ``full-dense`` runs, ``lr inspect``) and a reranker built on them.

:class:`FullModelReranker` scores a hit by the inner product of the full model's query
vector (the bundle's document encoder on ``instruction + query``, as the ``full-dense``
evaluation run encodes queries) and the full model's vector of the hit's title and text:
what the LightRetriever table approximates, computed exactly on the top hits only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle


def full_query_encoder(bundle: Bundle, instruction: str | None = None,
                       encoder: Any = None) -> Callable[[list[str]], Any]:
    """Queries -> [n, served_dim] dense vectors from the bundle's full document encoder
    (loaded here, once, unless ``encoder`` is given; ``runtime.open_doc_encoder``'s choice),
    with the instruction prompt of the LR table: the baseline the query table replaces
    (``full-dense`` runs, ``lr inspect``, the full-model reranker)."""
    from lr_opensearch.model.runtime import open_doc_encoder

    encoder = encoder if encoder is not None else open_doc_encoder(bundle)
    prompt = bundle.instructions[bundle.resolve_instruction(instruction)]
    return lambda texts: encoder.encode_dense([prompt + t for t in texts])


class FullModelReranker:
    """The bundle's full (document) model as a reranker; loads it once."""

    name = "full-model"

    def __init__(self, bundle: Bundle, instruction: str | None = None) -> None:
        from lr_opensearch.model.runtime import open_doc_encoder

        self._docs = open_doc_encoder(bundle)
        self._query = full_query_encoder(bundle, instruction, encoder=self._docs)

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        q = np.asarray(self._query([query]), dtype=np.float32)[0]
        d = np.asarray(self._docs.encode_dense(list(texts), documents=True), dtype=np.float32)
        return (d @ q).astype(float).tolist()
