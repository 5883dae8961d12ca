"""The package structure: no import circles, and the library never imports the apps.

The import graph is read from the source: every ``import``, also inside functions (a lazy
import) and under ``if TYPE_CHECKING:`` (it never runs, but a module that needs another's
types and is needed by it is one circle cut in two). Importing ``a.b.c`` runs
``a/__init__`` and ``a/b/__init__`` too, so those count as edges, except packages the
importer is itself inside (they are already being initialised: the usual re-export pattern).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("lr_opensearch", "ingest", "trainer")
APPS = ("ingest", "trainer")


def _modules(root: Path = REPO, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    found = {}
    for pkg in packages:
        for path in (root / pkg).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(tree: ast.AST) -> list[tuple[str, list[str], int]]:
    """(module, imported names, level) of every import: at the top, inside a function, or
    under ``if TYPE_CHECKING``."""
    out: list[tuple[str, list[str], int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((a.name, [], 0) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            out.append((node.module or "", [a.name for a in node.names], node.level))
    return out


def _graph(root: Path = REPO, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    modules = _modules(root, packages)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        for module, names, level in _imports(ast.parse(path.read_text(), str(path))):
            if level:  # relative: resolve against the importer's package
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (level - 1)]
                module = ".".join([*base, module] if module else base)
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules]
            targets.append(module)
            for target in targets:
                parts = target.split(".")
                for i in range(1, len(parts) + 1):
                    dep = ".".join(parts[:i])
                    inside = name == dep or name.startswith(dep + ".")
                    if dep in modules and dep != name and not inside:
                        graph[name].add(dep)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                found = dfs(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = dfs(node)
            if found:
                return found
    return None


def test_the_graph_sees_known_edges() -> None:
    graph = _graph()
    assert "lr_opensearch.bundle" in graph["lr_opensearch.query.encoder"]
    assert "lr_opensearch.indexing.run" in graph["ingest.cli"]
    assert "lr_opensearch.indexing" in graph["ingest.cli"]  # the package __init__ runs too
    assert "trainer.modeling" in graph["trainer.export"]  # an import inside a function


def test_no_import_circles() -> None:
    cycle = _cycle(_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


# The library's rooms, bottom first: a room imports rooms of its own layer or below, never
# above, and the rooms form no circle. The artifact (bundle/) is read by every room above
# it and reads none of them; the torch side (model/) and the query side (query/) read the
# artifact, never the workshop (fit/) that builds and fits it; search/ stands on the
# engine room, cluster/ (deploy) and indexing/ on search/. A new room goes in one layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "cache", "progress", "options", "instructions", "version"),
    ("legs", "node", "packaged"),
    ("bundle",),
    ("engine", "model", "query"),
    ("fit", "dashboards", "plugin"),
    ("search",),
    ("cluster", "indexing", "inspect", "ur2n"),
    ("evaluation",),
    ("cli",),
)


def room_of(module: str) -> str | None:
    """``lr_opensearch.<room>...`` -> ``<room>``; None for the package root (the public
    surface, above every room) and for ``__main__`` entry points (above everything)."""
    parts = module.split(".")
    if parts[0] != "lr_opensearch" or len(parts) < 2 or parts[-1] == "__main__":
        return None
    return parts[1]


def upward_imports(graph: dict[str, set[str]],
                   layers: tuple[tuple[str, ...], ...]) -> list[str]:
    """Imports from a room into a room of a higher layer, and rooms in no layer."""
    layer = {room: i for i, rooms in enumerate(layers) for room in rooms}
    bad = []
    for m, deps in graph.items():
        here = room_of(m)
        for d in deps:
            there = room_of(d)
            if here is None or there is None or here == there:
                continue
            for room in (here, there):
                if room not in layer:
                    bad.append(f"room {room!r} ({m}) is in no layer of LAYERS: put it in one")
            if here in layer and there in layer and layer[there] > layer[here]:
                bad.append(f"{m} -> {d} (layer {layer[here]} imports layer {layer[there]})")
    return sorted(set(bad))


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for m, deps in graph.items():
        here = room_of(m)
        if here is None:
            continue
        rooms.setdefault(here, set())
        rooms[here] |= {t for d in deps if (t := room_of(d)) not in (None, here)}
    return rooms


def test_no_room_imports_upward() -> None:
    graph = _graph()
    bad = upward_imports(graph, LAYERS)
    assert not bad, "imports up the rooms (see LAYERS):\n" + "\n".join(bad)
    cycle = _cycle(room_graph(graph))
    assert cycle is None, "the rooms import in a circle: " + " -> ".join(cycle or [])
    toy = {"lr_opensearch.a.x": {"lr_opensearch.b.y"}, "lr_opensearch.b.y": set()}
    assert upward_imports(toy, (("a",), ("b",))) == \
        ["lr_opensearch.a.x -> lr_opensearch.b.y (layer 0 imports layer 1)"]
    assert upward_imports(toy, (("b",),)) == \
        ["room 'a' (lr_opensearch.a.x) is in no layer of LAYERS: put it in one"]


def test_a_circle_is_found() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_a_circle_through_type_checking_and_a_lazy_import_is_found(tmp_path: Path) -> None:
    """One side imports the other's types under ``TYPE_CHECKING``, the other imports it
    inside a function (search.dsl and search.retriever did): still one circle."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "plan.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                 "    from pkg.retriever import Retriever\n")
    (pkg / "retriever.py").write_text("def dsl():\n    from pkg.plan import plan\n")
    graph = _graph(tmp_path, ("pkg",))
    assert _cycle(graph) == ["pkg.plan", "pkg.retriever", "pkg.plan"]


def test_the_library_never_imports_the_apps() -> None:
    graph = _graph()
    bad = sorted((m, d) for m, deps in graph.items() if m.startswith("lr_opensearch")
                 for d in deps if d.split(".")[0] in APPS)
    assert not bad, f"lr_opensearch imports an application: {bad}"


def test_public_surface() -> None:
    import lr_opensearch

    for name in ("Retriever", "QueryEncoder", "load_bundle", "make_client", "Bundle", "fuse"):
        assert name in lr_opensearch.__all__ and callable(getattr(lr_opensearch, name))


# ---- legs are defined once ------------------------------------------------------------------
LEG_HOME = REPO / "lr_opensearch" / "legs"
# the index layout names its two vector fields by kind (dense, sparse): not legs; only that
# one line of the adapter is exempt
INDEX_LAYOUT = REPO / "lr_opensearch" / "engine" / "adapter.py"
INDEX_LAYOUT_LINE = 'DENSE_KIND, SPARSE_KIND = "dense", "sparse"'
# the library and the ingest app search and index through the legs; trainer/ is not scanned:
# its dense_weight / sparse_weight weigh the model's two training losses, not search legs
LEG_SCANNED = ("lr_opensearch", "ingest")
# per-leg fields spelled by name: what the registry's mappings replaced
LEG_FIELD = re.compile(r"^(?:{legs})_(?:weight|score|norm|rank|hits|ip|engine_score)$")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (prose may name a leg)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def leg_spellings(source: str, legs: tuple[str, ...], where: str = "<source>") -> list[str]:
    """Every place in ``source`` that spells a leg by hand: a string constant (not a
    docstring) equal to a leg's name, or a name / attribute / keyword of the form
    ``<leg>_score``, ``<leg>_weight``, ... (the per-leg fields the registry replaced)."""
    tree = ast.parse(source, where)
    docs = _docstrings(tree)
    field = re.compile(LEG_FIELD.pattern.format(legs="|".join(map(re.escape, legs))))
    found = []
    for node in ast.walk(tree):
        spelled = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            spelled = node.value if node.value in legs else None
        elif isinstance(node, ast.Name):
            spelled = node.id if field.match(node.id) else None
        elif isinstance(node, ast.Attribute):
            spelled = node.attr if field.match(node.attr) else None
        elif isinstance(node, ast.keyword) and node.arg:
            spelled = node.arg if field.match(node.arg) else None
        elif isinstance(node, ast.arg):
            spelled = node.arg if field.match(node.arg) else None
        if spelled is not None:
            found.append(f"{where}:{getattr(node, 'lineno', '?')}: {spelled!r}")
    return found


def test_leg_names_live_only_in_the_leg_registry() -> None:
    from lr_opensearch import legs

    names = legs.names()
    bad = []
    for path in sorted(p for pkg in LEG_SCANNED for p in (REPO / pkg).rglob("*.py")):
        if LEG_HOME in path.parents:
            continue
        source = path.read_text()
        if path == INDEX_LAYOUT:
            assert source.count(INDEX_LAYOUT_LINE) == 1, "the index layout's kinds moved"
            source = source.replace(INDEX_LAYOUT_LINE, "")
        bad += leg_spellings(source, names, str(path.relative_to(REPO)))
    for path in sorted((REPO / "lr_opensearch").rglob("*.html")):
        text = path.read_text()
        bad += [f"{path.relative_to(REPO)}: {leg!r}" for leg in names
                if re.search(rf"\b{re.escape(leg)}\b", text)]
    assert not bad, "leg names spelled outside lr_opensearch/legs:\n" + "\n".join(bad)


def test_the_leg_check_can_fail() -> None:
    legs = ("dense", "bm25")
    source = 'x = "bm25"\ny = hit.dense_score\nf(bm25_weight=1)\n"""a dense docstring"""\n'
    found = leg_spellings('"""doc: dense"""\n' + source, legs)
    assert [f.split(": ", 1)[1] for f in found] == ["'bm25'", "'dense_score'", "'bm25_weight'"]


META_HOME = REPO / "lr_opensearch" / "engine" / "templates.py"  # META_KEY = "lightretriever"


def meta_key_spellings(source: str, key: str, where: str = "<src>") -> list[str]:
    """String constants equal to the index ``_meta`` key (docstrings may name it)."""
    return [f"{where}:{node.lineno}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and node.value == key]


def test_the_meta_key_is_spelled_once() -> None:
    """Every read and write of an index's ``_meta.lightretriever`` goes through
    ``engine.templates.META_KEY`` (the adapter's ``index_meta`` / ``put_index_meta``), not
    a literal of its own (the in-cluster room used to read the mapping by raw REST)."""
    from lr_opensearch.engine.templates import META_KEY

    bad = [hit for pkg in PACKAGES for path in sorted((REPO / pkg).rglob("*.py"))
           if path != META_HOME
           for hit in meta_key_spellings(path.read_text(), META_KEY, str(path.relative_to(REPO)))]
    assert not bad, f"{META_KEY!r} spelled outside {META_HOME.relative_to(REPO)}: {bad}"
    assert meta_key_spellings('"""lightretriever"""\nx = m["lightretriever"]\n', META_KEY) == \
        ["<src>:1", "<src>:2"]


def legs_shadowing(source: str, where: str = "<src>") -> list[str]:
    """Parameters and assignments named ``legs`` in a module that imports the ``legs``
    module (the name then means two things in one file)."""
    tree = ast.parse(source)
    imports_it = any(isinstance(n, ast.ImportFrom) and n.module == "lr_opensearch"
                     and any(a.name == "legs" and a.asname is None for a in n.names)
                     for n in ast.walk(tree))
    if not imports_it:
        return []
    return [f"{where}:{n.lineno}" for n in ast.walk(tree)
            if (isinstance(n, ast.arg) and n.arg == "legs")
            or (isinstance(n, ast.Name) and n.id == "legs" and isinstance(n.ctx, ast.Store))]


def test_the_legs_module_is_not_shadowed() -> None:
    bad = [hit for pkg in PACKAGES for path in sorted((REPO / pkg).rglob("*.py"))
           for hit in legs_shadowing(path.read_text(), str(path.relative_to(REPO)))]
    assert not bad, f"'legs' rebound where the legs module is imported: {bad}"
    assert legs_shadowing("from lr_opensearch import legs\ndef f(legs): legs = 1\n") == \
        ["<src>:2", "<src>:2"]
    assert legs_shadowing("def f(legs): pass\n") == []


META_ROOM = REPO / "lr_opensearch" / "engine"


def meta_edits(source: str, where: str = "<src>") -> list[str]:
    """Hand edits of an index's ``_meta``: a ``"_meta"`` string constant (reading the
    mapping's ``_meta`` by hand) or a ``put_index_meta`` call (writing it whole)."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return [f"{where}:{node.lineno}" for node in ast.walk(tree)
            if (isinstance(node, ast.Constant) and node.value == "_meta" and id(node) not in docs)
            or (isinstance(node, ast.Attribute) and node.attr == "put_index_meta")]


def test_meta_is_changed_only_through_the_adapter() -> None:
    """Outside the engine room, ``_meta`` is read and changed one key at a time
    (``adapter.meta_value``, ``adapter.update_meta``, ``engine.meta.meta_of``): a whole
    ``_meta`` read, changed and written back loses a concurrent writer's keys."""
    bad = [hit for pkg in PACKAGES for path in sorted((REPO / pkg).rglob("*.py"))
           if META_ROOM not in path.parents
           for hit in meta_edits(path.read_text(), str(path.relative_to(REPO)))]
    assert not bad, f"_meta edited by hand outside lr_opensearch/engine/: {bad}"
    assert meta_edits('m = mapping.get("_meta", {})\nadapter.put_index_meta(i, m)\n') == \
        ["<src>:1", "<src>:2"]


def root_imports(source: str, modules: set[str], where: str = "<src>") -> list[str]:
    """``from lr_opensearch import NAME`` of a name that is no module: it needs the package
    root (the public surface, which imports every public room) inside the library."""
    return [f"{where}:{node.lineno}: {a.name}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ImportFrom) and node.module == "lr_opensearch"
            and not node.level for a in node.names if f"lr_opensearch.{a.name}" not in modules]


def test_the_library_never_imports_from_its_package_root() -> None:
    """The version and the rest come from their own modules (``lr_opensearch.version``),
    never from the package root, an arrow from every room up to the top."""
    modules = set(_modules())
    bad = [hit for path in sorted((REPO / "lr_opensearch").rglob("*.py"))
           for hit in root_imports(path.read_text(), modules, str(path.relative_to(REPO)))]
    assert not bad, f"imports from the package root inside the library: {bad}"
    assert root_imports("from lr_opensearch import __version__, legs\n",
                        {"lr_opensearch.legs"}) == ["<src>:1: __version__"]


def report(root: Path = REPO) -> str:
    """The import graph of ``root`` in words: module and room circles, imports up the
    declared layers, and the rooms' own layers (longest import path below each room)."""
    graph = _graph(root)
    rooms = room_graph(graph)
    depth: dict[str, int] = {}

    def level(room: str, seen: tuple[str, ...] = ()) -> int:
        if room in seen:  # a circle: report it below, count it once here
            return 0
        if room not in depth:
            depth[room] = 1 + max((level(d, (*seen, room)) for d in rooms.get(room, ())),
                                  default=-1)
        return depth[room]

    by_level: dict[int, list[str]] = {}
    for room in sorted(rooms):
        by_level.setdefault(level(room), []).append(room)
    lines = [f"module circle: {' -> '.join(_cycle(graph) or []) or 'none'}",
             f"room circle: {' -> '.join(_cycle(rooms) or []) or 'none'}",
             "imports up the declared layers: "
             + ("none" if not (up := upward_imports(graph, LAYERS)) else "\n  " + "\n  ".join(up)),
             "room layers (bottom first):",
             *(f"  {n}: {', '.join(names)}" for n, names in sorted(by_level.items()))]
    return "\n".join(lines)


if __name__ == "__main__":  # python3 tests/project/test_structure.py [REPO]: the graph in words
    import sys

    print(report(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO))
