"""LightRetriever query encoding inside the cluster (OpenSearch ml-commons).

- ``export``: a bundle's query side as two deterministic model zips (dense ONNX table mean,
  sparse tokenizer + IDF), encoding exactly as :class:`~lr_opensearch.query.QueryEncoder`.
- ``mlapi``: the ml-commons REST calls (chunked upload, deploy, wait, undeploy).
- ``deploy``: ``lr models deploy``: upload, deploy, record the model ids in the index
  ``_meta``, create the search pipeline.
- ``requests``: the text-only sub-queries (``neural`` / ``neural_sparse`` / ``match``).

No torch: the ONNX graph is written with the ``onnx`` package (extra ``cluster``), which is
imported only when a dense model is exported.
"""

from __future__ import annotations

from lr_opensearch.cluster.deploy import deploy_bundle, undeploy_bundle
from lr_opensearch.cluster.export import ModelZip, export_dense, export_sparse
from lr_opensearch.cluster.requests import (
    check_serving,
    cluster_meta,
    text_hybrid_body,
    text_sub_queries,
)

__all__ = ["ModelZip", "check_serving", "cluster_meta", "deploy_bundle", "export_dense",
           "export_sparse", "text_hybrid_body", "text_sub_queries", "undeploy_bundle"]
