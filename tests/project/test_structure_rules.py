"""Rules of the code's shape beside the import graph (tests/project/test_structure.py): no
function of the library takes more than eight parameters, and one module takes leases."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


LEASE_HOME = REPO / "lr_opensearch" / "engine" / "lease.py"


def create_if_absent_calls(source: str, where: str = "<src>") -> list[str]:
    """Documents written "create if absent" (a lease's atomic step): ``_create_doc(...)`` or
    a client's ``create(..., id=...)``; the adapters' own ``_create_doc`` definitions aside."""
    return [f"{where}:{node.lineno}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and (node.func.attr == "_create_doc"
                 or (node.func.attr == "create" and any(k.arg == "id" for k in node.keywords)))
            and not (isinstance(node.func.value, ast.Attribute)
                     and node.func.value.attr == "client" and "def _create_doc" in source)]


def test_one_lease_implementation() -> None:
    """The ``_meta`` lock and the deploy lease are one mechanism (engine/lease.py): no other
    module of the library takes a lock or lease of its own."""
    bad = [hit for path in sorted((REPO / "lr_opensearch").rglob("*.py")) if path != LEASE_HOME
           for hit in create_if_absent_calls(path.read_text(), str(path.relative_to(REPO)))]
    assert not bad, f"a lease outside lr_opensearch/engine/lease.py: {bad}"
    assert create_if_absent_calls("client.create(index='x', id=k, body=d)\n"
                                  "adapter._create_doc('x', k, d)\n") == ["<src>:1", "<src>:2"]


MAX_PARAMETERS = 8  # beyond this a signature takes an options object (a frozen dataclass)


def long_signatures(source: str, where: str = "<src>") -> list[str]:
    """Functions taking more than ``MAX_PARAMETERS`` named parameters (``self``/``cls``
    and ``*args``/``**kwargs`` not counted), as ``where:line name(count)``."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
            count = len(names) - (names[:1] in (["self"], ["cls"]))
            if count > MAX_PARAMETERS:
                hits.append(f"{where}:{node.lineno} {node.name}({count})")
    return hits


def test_no_library_function_takes_more_than_eight_parameters() -> None:
    """A long signature passes an options object instead (issue 46)."""
    bad = [hit for path in sorted((REPO / "lr_opensearch").rglob("*.py"))
           for hit in long_signatures(path.read_text(), str(path.relative_to(REPO)))]
    assert not bad, f"take more than {MAX_PARAMETERS} parameters (pass an options object): {bad}"
    assert long_signatures("class A:\n    def f(self, a, b, c, d, e, f, g, h, *x, **y): pass\n"
                           "def g(a, b, c, d, e, f, g, h, *, i): pass\n") == ["<src>:3 g(9)"]
