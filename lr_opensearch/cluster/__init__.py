"""LightRetriever query encoding inside the cluster (OpenSearch ml-commons).

- ``export``: a bundle's query side as two deterministic model zips (dense ONNX table mean,
  sparse tokenizer + IDF), encoding exactly as :class:`~lr_opensearch.query.QueryEncoder`.
- ``deploy``: ``lr models deploy``: upload, deploy, record the model ids in the index
  ``_meta``, create the search pipeline, store the calibrated search template.

What it stands on lives in the rooms below: the ml-commons REST calls in
:mod:`lr_opensearch.engine.mlapi` (chunked upload, deploy, wait, undeploy), the text-only
sub-queries the retriever sends in :mod:`lr_opensearch.search.incluster` (``neural`` /
``neural_sparse`` / ``match``; re-exported here, where docs/IN_CLUSTER.md names them), the
scales in :mod:`lr_opensearch.search.calibration`.

No torch: the ONNX graph is written with the ``onnx`` package (extra ``cluster``), which is
imported only when a dense model is exported.
"""

from __future__ import annotations

from lr_opensearch.cluster.deploy import deploy_bundle, undeploy_bundle
from lr_opensearch.cluster.export import ModelZip, export_dense, export_sparse
from lr_opensearch.search.incluster import (
    check_serving,
    cluster_meta,
    text_hybrid_body,
    text_sub_queries,
)

__all__ = ["ModelZip", "check_serving", "cluster_meta", "deploy_bundle", "export_dense",
           "export_sparse", "text_hybrid_body", "text_sub_queries", "undeploy_bundle"]
