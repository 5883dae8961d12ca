"""Rerankers that run a model (torch): the bundle's full model as a second stage.

:class:`FullModelReranker` scores a hit by the inner product of the full model's query
vector (the bundle's document encoder on ``instruction + query``, as the ``full-dense``
evaluation run encodes queries) and the full model's vector of the hit's title and text:
what the LightRetriever table approximates, computed exactly on the top hits only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle


class FullModelReranker:
    """The bundle's full (document) model as a reranker; loads it once."""

    name = "full-model"

    def __init__(self, bundle: Bundle, instruction: str | None = None) -> None:
        from lr_opensearch.evaluation.runs import full_query_encoder
        from lr_opensearch.model import DocEncoder

        self._docs = DocEncoder.from_bundle(bundle)
        self._query = full_query_encoder(bundle, instruction, encoder=self._docs)

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        q = np.asarray(self._query([query]), dtype=np.float32)[0]
        d = np.asarray(self._docs.encode_dense(list(texts)), dtype=np.float32)
        return (d @ q).astype(float).tolist()
