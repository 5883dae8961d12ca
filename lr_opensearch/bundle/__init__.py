"""The model bundle: the directory that carries a LightRetriever model from the trainer (or
``lr bundle build``) to ingest and to the query side, loadable without executing code.

- ``config``: ``BundleConfig`` (the model and how its vectors are used).
- ``format``: ``save_bundle``, ``load_bundle``, ``Bundle`` (the one loader).
- ``files``: hashing, table and tokenizer files.
- ``keys``: the reversible, dot-free sparse key encoding shared by ingest and queries.
- ``store``: the local bundle store's lookups (``store_dir``, ``find_bundle``,
  ``bundle_of_index``).

Importing this package is light (numpy, tokenizers, safetensors); it is the artifact only:
its modules import neither torch nor scipy. Building and fitting a bundle is the
workshop's, :mod:`lr_opensearch.fit`.
"""

from __future__ import annotations

from lr_opensearch.bundle.config import BundleConfig
from lr_opensearch.bundle.format import (
    DOC_ENCODER_DIR,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_FILE,
    TABLES_DIR,
    TOKENIZER_FILE,
    Bundle,
    compute_bundle_id,
    load_bundle,
    save_bundle,
)

__all__ = ["DOC_ENCODER_DIR", "FORMAT_NAME", "FORMAT_VERSION", "MANIFEST_FILE", "TABLES_DIR",
           "TOKENIZER_FILE", "Bundle", "BundleConfig", "compute_bundle_id", "load_bundle",
           "save_bundle"]
