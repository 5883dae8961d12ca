"""The sparse document side's fits in ``lr bundle build`` (issue 48): on the torch model.

``fit_doc_side`` runs the low-rank correction of the projection (``--fit-sparse-lowrank``,
``fit.sparse_lowrank``) and then the per-term scale and bias (``--fit-sparse``,
``fit.sparse_head``) on the table fit's documents and pseudo-queries, and sets what they
fitted on the model (saved with its doc encoder: ``LightRetrieverModel.save_sparse_fits``).
Both train with torch: a build on ONNX Runtime refuses them before any work
(``fit.build.build_runtime``, ``FitRecipe.sparse_fits``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lr_opensearch.errors import ConfigError

if TYPE_CHECKING:
    from lr_opensearch.fit.tables import FitInputs, FitRecipe
    from lr_opensearch.model import LightRetrieverModel
    from lr_opensearch.model.settings import DocSettings


def fit_doc_side(model: LightRetrieverModel, tokenizer: Any, inputs: FitInputs, recipe: FitRecipe,
                 doc: DocSettings, *, progress: bool = True) -> dict[str, Any]:
    """The sparse fits ``recipe`` asks for, set on ``model``; their records keyed as the
    manifest's ``fit`` holds them (``sparse_lowrank``, ``sparse_doc``)."""
    stats: dict[str, Any] = {}
    if recipe.sparse_lowrank is not None:
        stats["sparse_lowrank"] = _fit_lowrank(model, tokenizer, inputs, recipe, doc, progress=progress)
    if recipe.sparse is not None:
        stats["sparse_doc"] = _fit_affine(model, tokenizer, inputs, recipe, doc, progress=progress)
    return stats


def _fit_affine(model: LightRetrieverModel, tokenizer: Any, inputs: FitInputs, recipe: FitRecipe,
               doc: DocSettings, *, progress: bool = True) -> dict[str, Any]:
    """Fit the sparse head's per-term scale and bias (``fit.sparse``) on the table fit's
    documents and pseudo-queries, set it on ``model`` and return the record of the fit.
    Documents are encoded as ingest encodes them, at the recipe's precision."""
    from lr_opensearch.fit.sparse_head import fit_sparse_head

    if recipe.sparse is None:
        raise ValueError("_fit_affine needs a recipe with sparse settings")
    settings = recipe.sparse
    model.set_term_affine(None)
    head, stats = _fit_with_encoder(model, tokenizer, doc, recipe, "--fit-sparse",
                                    lambda enc: fit_sparse_head(enc, inputs, settings, progress=progress))
    model.set_term_affine(head)
    return stats.to_dict()


def _fit_lowrank(model: LightRetrieverModel, tokenizer: Any, inputs: FitInputs, recipe: FitRecipe,
                doc: DocSettings, *, progress: bool = True) -> dict[str, Any]:
    """Fit a low-rank correction of the sparse projection (``fit.sparse_lowrank``) on the
    table fit's documents and pseudo-queries, set it on ``model`` and return the record of
    the fit."""
    from lr_opensearch.fit.sparse_lowrank import fit_sparse_lowrank

    if recipe.sparse_lowrank is None:
        raise ValueError("_fit_lowrank needs a recipe with low-rank settings")
    settings = recipe.sparse_lowrank
    model.sparse_lowrank = None
    head, stats = _fit_with_encoder(model, tokenizer, doc, recipe, "--fit-sparse-lowrank",
                                    lambda enc: fit_sparse_lowrank(enc, inputs, settings, progress=progress))
    model.sparse_lowrank = head.to(model.device)
    return stats.to_dict()


def _fit_with_encoder(model: LightRetrieverModel, tokenizer: Any, doc: DocSettings, recipe: FitRecipe,
                      flag: str, fit: Callable[[Any], Any]) -> Any:
    """``fit(encoder)`` with the model's documents encoded as ingest encodes them, at the
    recipe's precision; the model's training mode restored."""
    from lr_opensearch.model import DocEncoder

    if model.medusa is not None:
        raise ConfigError(f"{flag} fits the 'max' sparse head; this model's sparse_mode is "
                          f"{model.sparse_mode!r}; build without {flag}")
    was_training = model.training
    encoder = DocEncoder(model, tokenizer, doc, device=model.device, batch_size=32,
                         precision=recipe.encode_precision)
    try:
        return fit(encoder)
    finally:
        model.train(was_training)
