"""UR²N: one model that retrieves (XTR-style token retrieval) and reranks (true / false).

Every piece of the method, by role (the library's files here, the apps' beside them):

=====================  =========================================  ===========
role                   where                                      torch?
=====================  =========================================  ===========
bundle (artifact)      ``lr_opensearch.ur2n.bundle``              no
text framing           ``lr_opensearch.ur2n.text``                no (tokenizers)
model + reranker       ``lr_opensearch.ur2n.model``               yes
first stage (search)   ``lr_opensearch.ur2n.xtr``                 no
token index template   ``index_templates/opensearch/token_index.json``
token index ingest     ``ingest/token_index.py`` (``python -m ingest.tokens``)
training               ``trainer/ur2n.py``, ``trainer/losses/xtr.py``
evaluation runs        ``lr_opensearch.evaluation.model_runs`` (``xtr``, ``xtr+rerank``)
=====================  =========================================  ===========

Importing this package imports nothing (the roles are imported by name).
"""

from __future__ import annotations
