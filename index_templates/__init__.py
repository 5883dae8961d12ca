"""The index templates and search pipelines of lr-opensearch, as JSON data files.

A package only so that installed copies (wheels, not just editable installs) carry the
files; ``lr_opensearch.engine.templates`` renders them. Nothing to import here.
"""
