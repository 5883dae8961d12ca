"""The ingest app: ``python -m ingest.bulk corpus.jsonl --bundle B --index I`` (and ``lr ingest``):
argument parsing, the summary, and ``--workers N`` local worker processes over the library's one
indexing call, ``lr_opensearch.indexing.run``."""
