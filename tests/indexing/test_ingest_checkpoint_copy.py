"""A checkpoint belongs to one copy of an index (issue 29, found by the clean-clone CI run of
`lr demo`): a rerun against a deleted-and-recreated index, or the same index name on another
cluster, must index the corpus again instead of trusting the old checkpoint and indexing
nothing."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from ingest_support import index_ids, ingest_config

from lr_opensearch.indexing.run import run as ingest

LEGACY = Path(__file__).resolve().parents[1] / "data" / "legacy-legs"
CORPUS = LEGACY / "beir" / "corpus.jsonl.gz"

pytestmark = pytest.mark.node


def test_a_recreated_index_is_ingested_again(opensearch_url: str, os_client: Any,
                                             tmp_path: Path) -> None:
    index = f"lr-test-ckcopy-{uuid.uuid4().hex[:8]}"
    config = ingest_config(CORPUS, LEGACY / "bundle", index, opensearch_url, tmp_path / "state")
    try:
        first = ingest(config)
        assert first.counts.indexed == 24 and len(index_ids(os_client, index)) == 24
        again = ingest(config)  # the same copy: the checkpoint says done, nothing is redone
        assert again.complete and len(index_ids(os_client, index)) == 24
        os_client.indices.delete(index=index)  # the index is gone (or: another cluster)
        third = ingest(config)
        assert third.counts.indexed == 24
        assert len(index_ids(os_client, index)) == 24
    finally:
        os_client.indices.delete(index=index, ignore_unavailable=True)
