"""Evaluation on BEIR-format collections.

- ``beir``: loading datasets, metrics through ir-measures, TREC runs, reports, tables.
- ``config``: the run names, the default runs, ``EvalConfig``.
- ``model_runs``: the runs with a model at query time (``+rerank``, ``xtr``), ``StageClock``.
- ``runs``: the runs of ``lr eval`` (BM25, full model, LightRetriever dense / sparse /
  hybrids), the weight sweep and its plot; torch only for the ``full-dense`` run.
"""

from __future__ import annotations

from lr_opensearch.evaluation.beir import (
    METRIC_KEYS,
    Dataset,
    Run,
    compare_table,
    compute_metrics,
    load_beir,
    load_reports,
    read_qrels,
    read_trec,
    write_trec,
)
from lr_opensearch.evaluation.config import EvalConfig, default_runs, parse_runs, run_names

__all__ = ["EvalConfig", "METRIC_KEYS", "Dataset", "Run", "compare_table",
           "compute_metrics", "default_runs", "load_beir", "load_reports", "parse_runs", "read_qrels",
           "read_trec", "run_names", "write_trec"]
