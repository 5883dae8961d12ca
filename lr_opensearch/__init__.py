"""lr-opensearch: LightRetriever hybrid retrieval inside OpenSearch and Elasticsearch.

Documents are encoded offline by a full model (dense vector + sparse vocabulary vector);
queries are encoded with no deep model at all (a tokenizer and a table lookup).

Importing this package is light: it pulls in neither torch nor transformers. The
torch-based parts (document encoder, bundle building) live in ``lr_opensearch.model``
and are imported only where used.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
