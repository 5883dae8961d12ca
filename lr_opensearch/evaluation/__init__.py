"""Evaluation on BEIR-format collections.

- ``beir``: loading datasets, metrics through ir-measures, TREC runs, reports, tables.
- ``runs``: the runs of ``lr eval`` (BM25, full model, LightRetriever dense / sparse /
  hybrids), the weight sweep and its plot; torch only for the ``full-dense`` run.
"""

from __future__ import annotations

from lr_opensearch.evaluation.beir import (
    DEFAULT_RUNS,
    METRIC_KEYS,
    RUN_NAMES,
    Dataset,
    Run,
    compare_table,
    compute_metrics,
    load_beir,
    load_reports,
    parse_runs,
    read_qrels,
    read_trec,
    write_trec,
)

__all__ = ["DEFAULT_RUNS", "METRIC_KEYS", "RUN_NAMES", "Dataset", "Run", "compare_table",
           "compute_metrics", "load_beir", "load_reports", "parse_runs", "read_qrels",
           "read_trec", "write_trec"]
