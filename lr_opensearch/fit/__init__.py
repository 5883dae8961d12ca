"""The workshop: building a model bundle and fitting its query tables. It writes the
artifact that :mod:`lr_opensearch.bundle` defines and reads; nothing on the query side
imports it.

- ``build``: a bundle from any HF checkpoint (``lr bundle build``) or from a trained model
  (``trainer.export``); on torch, or with none on ONNX Runtime (``onnx_build``, issue 47).
- ``tables``: fitting a bundle's query tables to a corpus (``FitRecipe``, ``prepare_fit``,
  ``fit_bundle_tables``), the IDF sparse query weights.
- ``ridge`` / ``distill`` (numpy, scipy): the ridge fit of one table, the listwise step after.
- ``pseudo`` (numpy): fit files, their facts, and the pseudo-queries cut from documents
  (also what :mod:`lr_opensearch.search.calibration` measures scales with).
- ``fitted``: the store's fitted bundles (``fitted_bundle``: built once, found by name).

Importing this package imports none of its modules: import each by name.
"""
