"""``BundleConfig``: what a bundle's model is and how its vectors are to be used, as its
manifest records it (checked on construction; bundles of every earlier version load with
their ids: see the field comments).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from lr_opensearch import legs
from lr_opensearch.bundle.keys import KEY_ENCODING
from lr_opensearch.errors import BundleError, ConfigError
from lr_opensearch.legs import default_weights, validate_weights, weights_of
from lr_opensearch.options import (
    KINDS,
    POOLINGS,
    QUERY_NORMS,
    SEMANTICS,
    SPARSE_HEADS,
    SPARSE_MODES,
    choice,
)

logger = logging.getLogger(__name__)

#: Sparse terms stored per document in new bundles. 128 since 2026-11-25 (256 before): on
#: SciFact train queries (docs/RESULTS.md, bench/doc_prune.py) the top 128 of a document's
#: terms gave LR hybrid nDCG@10 0.7149 vs 0.7102 with 256, a third less index and 27 % less
#: hybrid latency. Bundles record their value; old ones keep theirs.
DEFAULT_SPARSE_TOP_K = 128

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def _choice(field_name: str, value: str, valid: tuple[str, ...]) -> None:
    choice(f"BundleConfig.{field_name}", value, valid, BundleError)


@dataclass(frozen=True)
class BundleConfig:
    """What a bundle's model is and how its vectors are to be used (stored in the manifest)."""

    backbone_name: str
    architecture: str
    kind: str
    pooling: str
    normalize: bool
    dense_dim: int
    served_dim: int
    max_length: int
    sparse_head: str
    sparse_top_k: int = DEFAULT_SPARSE_TOP_K
    sparse_min_weight: float = 0.0
    key_encoding: str = KEY_ENCODING
    instructions: Mapping[str, str] = field(default_factory=lambda: {"default": ""})
    default_instruction: str = "default"
    #: fusion weight per leg (:mod:`lr_opensearch.legs`); the manifest keeps the legs of
    #: weight > 0. Bundles written before the leg registry have one ``<leg>_weight`` field
    #: per leg (and those before the BM25 leg none for it: 0); they load with the same id.
    weights: Mapping[str, float] = field(default_factory=default_weights)
    fusion_semantics: str = "opensearch"
    remove_stopwords: bool = False
    #: with ``normalize``: "rows" = the table holds L2-normalised token vectors (bundles
    #: written before this field); "mean" = raw token vectors whose mean is the query (its
    #: L2 norm would not change a ranking), as the reference. The query side only averages.
    query_norm: str = "rows"
    #: where the doc encoder's sparse vector comes from (``options.SPARSE_MODES``): "max"
    #: (LightRetriever; every bundle written before the field) or a BRIDGE-Embed Medusa
    #: mode, whose heads are ``doc_encoder/medusa.safetensors`` and whose stored weights are
    #: Norm(SoftTopK(h, sparse_top_k, soft_top_k_temperature)). The three fields are left out
    #: of the manifest in "max" mode, so "max" bundles keep their ids.
    sparse_mode: str = "max"
    medusa_heads: int = 0
    soft_top_k_temperature: float = 0.05
    #: text put before every document by the doc encoder (e5's "passage: "); its tokens
    #: count in the dense pooling but not in the sparse max (``DocEncoder``). Left out of
    #: the manifest when empty, so bundles written before the field keep their ids.
    document_prompt: str = ""
    #: the doc encoder's "max" sparse vector goes through a fitted per-term scale and bias
    #: (``doc_encoder/sparse_term_affine.safetensors``, ``model.term_affine``; issue 48).
    #: Left out of the manifest when False, so bundles written before the field keep their ids.
    sparse_term_affine: bool = False
    #: the rank of the fitted low-rank correction of the sparse projection
    #: (``doc_encoder/sparse_lowrank.safetensors``, ``model.sparse_lowrank``; issue 48); 0: none.
    #: Left out of the manifest when 0, so bundles written before the field keep their ids.
    sparse_lowrank: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "instructions", MappingProxyType(dict(self.instructions)))
        _choice("kind", self.kind, KINDS)
        _choice("pooling", self.pooling, POOLINGS)
        _choice("sparse_head", self.sparse_head, SPARSE_HEADS)
        _choice("fusion_semantics", self.fusion_semantics, SEMANTICS)
        _choice("query_norm", self.query_norm, QUERY_NORMS)
        _choice("key_encoding", self.key_encoding, (KEY_ENCODING,))
        _choice("sparse_mode", self.sparse_mode, SPARSE_MODES)
        if self.sparse_term_affine and self.sparse_mode != "max":
            raise BundleError(f"BundleConfig: sparse_term_affine applies to sparse_mode 'max', "
                              f"not {self.sparse_mode!r}")
        if self.sparse_lowrank < 0 or (self.sparse_lowrank and self.sparse_mode != "max"):
            raise BundleError(f"BundleConfig: sparse_lowrank is a rank >= 0 and applies to sparse_mode "
                              f"'max'; got {self.sparse_lowrank} with {self.sparse_mode!r}")
        if self.sparse_mode != "max" and (self.medusa_heads < 1 or not self.soft_top_k_temperature > 0):
            raise BundleError(f"BundleConfig: sparse_mode {self.sparse_mode!r} needs medusa_heads >= 1 "
                              f"and soft_top_k_temperature > 0, got {self.medusa_heads} and "
                              f"{self.soft_top_k_temperature}")
        if not 0 < self.served_dim <= self.dense_dim:
            raise BundleError(
                f"BundleConfig: served_dim={self.served_dim} must be in 1..dense_dim={self.dense_dim}"
            )
        if self.max_length < 1 or self.sparse_top_k < 1:
            raise BundleError("BundleConfig: max_length and sparse_top_k must be >= 1")
        try:
            weights = validate_weights(self.weights, self.fusion_semantics)
        except ConfigError as exc:
            raise BundleError(f"BundleConfig: fusion weights: {exc}") from None
        object.__setattr__(self, "weights", MappingProxyType(weights))
        if not self.instructions:
            raise BundleError("BundleConfig.instructions is empty; give at least {'default': ''}")
        bad = [n for n in self.instructions if not _NAME_RE.match(n)]
        if bad:
            raise BundleError(
                f"BundleConfig: instruction names {bad} are invalid; use 1-64 characters "
                "[A-Za-z0-9_-] starting with a letter or digit (they name table files)"
            )
        if self.default_instruction not in self.instructions:
            raise BundleError(
                f"BundleConfig.default_instruction={self.default_instruction!r} is not one of "
                f"the instructions {sorted(self.instructions)}"
            )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (instructions as a plain dict)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["instructions"] = dict(self.instructions)
        out["weights"] = {leg: w for leg, w in self.weights.items() if w > 0.0}
        if self.sparse_mode == "max":  # as written before the Medusa modes: the same ids
            for name in ("sparse_mode", "medusa_heads", "soft_top_k_temperature"):
                del out[name]
        if not self.document_prompt:
            del out["document_prompt"]
        if not self.sparse_term_affine:
            del out["sparse_term_affine"]
        if not self.sparse_lowrank:
            del out["sparse_lowrank"]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "config") -> BundleConfig:
        """Build from a dict; unknown keys are ignored with a warning, missing ones are errors."""
        legacy = {f"{leg}_weight" for leg in legs.names()} & set(data)
        if legacy:  # written before the leg registry: one field per leg
            data = {**{k: v for k, v in data.items() if k not in legacy},
                    "weights": weights_of(data)}
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            logger.warning("%s: ignoring unknown BundleConfig fields %s", source, unknown)
        required = [f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [n for n in required if n not in data]
        if missing:
            raise BundleError(f"{source}: BundleConfig fields missing: {missing}")
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except TypeError as exc:
            raise BundleError(f"{source}: invalid BundleConfig: {exc}") from None
