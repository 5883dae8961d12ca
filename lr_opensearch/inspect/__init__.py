"""``lr inspect``: a local web page to look at what the retriever does (needs ``[inspect]``).

:func:`create_app` builds the Flask application for one index and bundle; ``lr inspect``
serves it on 127.0.0.1. See :mod:`lr_opensearch.inspect.app`.
"""

from __future__ import annotations

from lr_opensearch.inspect.app import create_app, query_tokens

__all__ = ["create_app", "query_tokens"]
