"""The LightRetriever OpenSearch plugin's Python side (no torch).

- ``artifact``: a bundle's query side as the parts the plugin's Java ``QueryModel`` loads.
- ``javac``: compiling the plugin's pure-JDK encoder core (tests, the plugin build).
- ``unicode_tables``: the BERT character classes probed from tokenizers, as Java source.
"""
