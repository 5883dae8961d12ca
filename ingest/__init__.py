"""The ingest worker: ``python -m ingest.bulk corpus.jsonl --bundle B --index I``."""
