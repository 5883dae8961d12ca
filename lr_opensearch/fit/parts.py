"""What writing a bundle needs of its backbone, on either runtime (``fit.build`` on torch,
``fit.onnx_build`` on ONNX Runtime): the parts, and the fit of the tables with an encoder."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lr_opensearch.fit.tables import FitInputs, FitRecipe, FitResult, fit_bundle_tables
from lr_opensearch.model.checkpoint import Checkpoint
from lr_opensearch.model.settings import DocSettings

#: (instruction ids, vocabulary size) -> the unfitted query table [V, H] float32
TokenTable = Callable[[Sequence[int], int], np.ndarray]


@dataclass(frozen=True)
class BackboneParts:
    """What writing a bundle needs of its backbone, on either runtime.

    Attributes:
        facts: what the bundle's config records (``model.checkpoint.Checkpoint``).
        token_table: (instruction ids, V) -> the unfitted table [V, H] float32.
        fit: (unfitted tables, instructions, doc settings, recipe) -> ``FitResult``.
        save: writes the doc encoder's model files into a directory.
        fields: further ``BundleConfig`` fields (a Medusa sparse mode's).
        fit_sparse: (the table fit's inputs, doc settings, recipe) -> the records of the
            sparse document side's fits (``fit.sparse_build.fit_doc_side``), which it sets
            on the model that ``save`` writes; None: this runtime cannot fit them (torch's).
    """

    facts: Checkpoint
    token_table: TokenTable
    fit: Callable[[Mapping[str, np.ndarray], Mapping[str, str], DocSettings, FitRecipe], FitResult]
    save: Callable[[Path], Any]
    fields: Mapping[str, Any] = field(default_factory=dict)
    fit_sparse: Callable[[FitInputs, DocSettings, FitRecipe], dict[str, Any]] | None = None


def fit_with(encoder: Any, tokenizer: Any, tables: Mapping[str, np.ndarray],
             instructions: Mapping[str, str], recipe: FitRecipe, *, progress: bool = True,
             ) -> FitResult:
    """``fit.fit_bundle_tables`` with targets from ``encoder`` (``DocEncoder`` or
    ``OnnxDocEncoder``).

    A target is ``encoder.encode_dense([instruction + query])`` at the full dense dim:
    what the ``full-dense`` evaluation run computes for a query; with ``distill``, the
    candidate documents are encoded by the same ``encode_dense`` with the document prompt,
    as ingest encodes them.
    """
    return fit_bundle_tables(tokenizer, tables, instructions, encoder.encode_dense, recipe,
                             progress=progress,
                             embed_docs=lambda texts: encoder.encode_dense(texts, documents=True))
