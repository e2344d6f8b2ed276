"""The import graph of the four packages points one way: placement <- executors <- cluster <- sim.

Why a test: layers that point back and module cycles are what make the code hard to extend;
an ``ast`` walk of every import (absolute, relative, inside functions) catches
them when they are written, not when someone tries to reuse a lower layer alone. ``sim.bench``
may import every layer (benchmarks measure the whole stack); placement and executors import
neither Ray nor Spark (they run in plain processes and in numba kernels); no module reaches
for another module's private (``_x``) names, nor for another object's private attributes
(``obj._x`` where the name ``_x`` is not the module's own); and inside ``cluster`` each
package imports only the packages below it (``CLUSTER_FORBIDDEN``: a node knows nothing of the
deployment that drives it, a feed nothing of the service that runs it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("placement", "executors", "cluster", "sim")
# Modules allowed to import any layer (benchmarks measure the whole stack).
ANY_LAYER = ("sim.bench",)
NO_RUNTIME = {"placement": ("ray", "pyspark"), "executors": ("ray", "pyspark")}
# cluster package -> the cluster packages it must not import (workers below, coordinators above)
CLUSTER_FORBIDDEN = {
    "runtime": ("debs", "answers", "node", "deployment", "feeds", "runs", "service"),
    "debs": ("runtime", "answers", "node", "deployment", "feeds", "runs", "service"),
    "answers": ("node", "deployment", "feeds", "runs", "service"),
    "node": ("deployment", "feeds", "runs", "service"),
    "deployment": ("feeds", "runs", "service"),
    "feeds": ("runs", "service"),
}
# the standard library's public names that start with one underscore (namedtuple's API)
PUBLIC_UNDERSCORE = {"_replace", "_fields", "_asdict", "_make", "_field_defaults"}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path) -> list[tuple[str, str | None]]:
    """Every import in ``path`` as (absolute module, imported name or None), relative ones
    resolved against the module's package; imports inside functions count the same."""
    mod = module_name(path, root)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                out.append((target, alias.name))
    return out


def scan(root: Path, layers=LAYERS):
    """The module graph of ``layers`` under ``root`` and the raw imports of each module."""
    modules: dict[str, Path] = {}
    for layer in layers:
        for path in sorted((root / layer).rglob("*.py")):
            modules[module_name(path, root)] = path
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    raw: dict[str, list[tuple[str, str | None]]] = {}
    for mod, path in modules.items():
        raw[mod] = imports_of(path, root)
        for target, name in raw[mod]:
            # ``from pkg import mod`` imports the module pkg.mod when it exists
            full = f"{target}.{name}" if name else None
            dest = full if full in modules else target
            while dest and dest not in modules:
                dest = dest.rpartition(".")[0]
            if dest and dest != mod:
                graph.add_edge(mod, dest)
    return modules, graph, raw


def layer_of(mod: str, layers=LAYERS) -> int | None:
    top = mod.split(".")[0]
    return layers.index(top) if top in layers else None


def back_edges(graph: nx.DiGraph, layers=LAYERS, any_layer=ANY_LAYER) -> list[tuple[str, str]]:
    out = []
    for a, b in graph.edges:
        if any(a == p or a.startswith(p + ".") for p in any_layer):
            continue
        la, lb = layer_of(a, layers), layer_of(b, layers)
        if la is not None and lb is not None and lb > la:
            out.append((a, b))
    return sorted(out)


def cycles(graph: nx.DiGraph) -> set[frozenset[str]]:
    # a package __init__ importing its own submodules is not a cycle of ideas
    g = graph.copy()
    g.remove_edges_from([(a, b) for a, b in graph.edges if b.startswith(a + ".")])
    return {frozenset(c) for c in nx.simple_cycles(g)}


def runtime_imports(raw, no_runtime=NO_RUNTIME) -> list[tuple[str, str]]:
    out = []
    for mod, imps in raw.items():
        banned = no_runtime.get(mod.split(".")[0], ())
        for target, _name in imps:
            if target.split(".")[0] in banned:
                out.append((mod, target))
    return sorted(out)


def private_imports(modules, raw) -> list[tuple[str, str]]:
    """(importer, 'module._name') for a private name imported from another project module."""
    out = []
    for mod, imps in raw.items():
        for target, name in imps:
            private = name and name.startswith("_") and not name.startswith("__")
            if private and target in modules and target != mod:
                out.append((mod, f"{target}.{name}"))
    return sorted(out)


def cluster_back_edges(graph: nx.DiGraph, forbidden=CLUSTER_FORBIDDEN) -> list[tuple[str, str]]:
    """(importer, imported) inside ``cluster`` where a package imports one it must not."""
    out = []
    for a, b in graph.edges:
        pa, pb = a.split("."), b.split(".")
        if pa[0] == pb[0] == "cluster" and len(pa) > 2 and len(pb) > 1:
            if pb[1] in forbidden.get(pa[1], ()):
                out.append((a, b))
    return sorted(out)


def own_private_names(tree: ast.AST) -> set[str]:
    """The private names a module defines: its functions, classes, globals and the attributes
    its classes set on ``self``/``cls``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return {n for n in names if n.startswith("_")}


def private_reaches(modules: dict[str, Path]) -> list[tuple[str, int, str]]:
    """(module, line, expression) for ``obj._x`` where ``obj`` is not ``self``/``cls``/``super()``
    and the module does not define ``_x`` itself: reaching into another object's state."""
    out = []
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        own = own_private_names(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            name = node.attr
            if not name.startswith("_") or name.startswith("__") or name in PUBLIC_UNDERSCORE:
                continue
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Call) and getattr(base.func, "id", None) == "super":
                continue
            if name in own:
                continue
            out.append((mod, node.lineno, ast.unparse(node)))
    return sorted(out)


@pytest.fixture(scope="module")
def tree():
    """One scan of the real tree for all the checks below."""
    return scan(ROOT)


def test_no_back_edges(tree):
    _, graph, _ = tree
    assert back_edges(graph) == []


def test_no_module_cycles(tree):
    _, graph, _ = tree
    assert sorted(map(sorted, cycles(graph))) == []


def test_placement_and_executors_import_no_ray_or_spark(tree):
    _, _, raw = tree
    assert runtime_imports(raw) == []


def test_no_private_names_across_modules(tree):
    modules, _, raw = tree
    assert sorted(set(private_imports(modules, raw))) == []


def test_cluster_packages_import_only_below(tree):
    _, graph, _ = tree
    assert cluster_back_edges(graph) == []


def test_no_reach_into_private_state(tree):
    modules, _, _ = tree
    assert private_reaches(modules) == []


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_self_check_detects_planted_violations(tmp_path):
    """The checks find what is planted in a throwaway tree, so they cannot pass vacuously."""
    _write(
        tmp_path,
        {
            "placement/__init__.py": "",
            "placement/a.py": "def f():\n    from ..sim import top  # back edge, in a function\n",
            "placement/b.py": "import ray\nfrom .c import g\n",
            "placement/c.py": "from placement.b import x  # cycle b <-> c\n",
            "placement/d.py": "from .c import _helper as y\nfrom . import _private\n",
            "executors/__init__.py": "",
            "executors/e.py": "from placement.a import _hidden\nfrom pyspark.sql import Row\n",
            "cluster/__init__.py": "",
            "cluster/k.py": "import sim.top\n",
            "sim/__init__.py": "",
            "sim/top.py": "from cluster.k import x\n",
            "sim/bench/__init__.py": "",
            "sim/bench/b.py": "from executors import e\nimport sim.top\n",
        },
    )
    modules, graph, raw = scan(tmp_path)
    assert back_edges(graph) == [("cluster.k", "sim.top"), ("placement.a", "sim.top")]
    assert cycles(graph) == {
        frozenset({"placement.b", "placement.c"}),
        frozenset({"cluster.k", "sim.top"}),
    }
    assert runtime_imports(raw) == [("executors.e", "pyspark.sql"), ("placement.b", "ray")]
    assert private_imports(modules, raw) == [
        ("executors.e", "placement.a._hidden"),
        ("placement.d", "placement._private"),
        ("placement.d", "placement.c._helper"),
    ]
    # ``from pkg import mod`` is an edge to the module; the clean parts of the tree are clean
    assert ("sim.bench.b", "executors.e") in graph.edges
    assert not back_edges(graph.subgraph(["sim.bench.b", "executors.e", "placement.a"]))


def test_self_check_detects_planted_cluster_violations(tmp_path):
    """A planted private reach and a planted import against cluster's layering are found; the
    allowed forms (own names, ``self``, ``super()``, namedtuple's API) are not."""
    _write(
        tmp_path,
        {
            "cluster/__init__.py": "",
            "cluster/node/__init__.py": "",
            "cluster/node/core.py": "from cluster.deployment.dep import Dep\n",
            "cluster/deployment/__init__.py": "",
            "cluster/deployment/dep.py": (
                "class Dep:\n"
                "    def __init__(self):\n"
                "        self._seq = 0\n"
                "    def copy(self, other):\n"
                "        self._seq = other._seq\n"
                "        return super()._x, self._y, p._replace(a=1)\n"
            ),
            "cluster/feeds/__init__.py": "",
            "cluster/feeds/f.py": (
                "from cluster.service.s import S\n"
                "def push(dep):\n"
                "    dep._seq += 1\n"
                "    return dep.seq\n"
            ),
            "cluster/service/__init__.py": "",
            "cluster/service/s.py": "from cluster.feeds.f import push\nS = 1\n",
        },
    )
    modules, graph, _ = scan(tmp_path)
    assert cluster_back_edges(graph) == [
        ("cluster.feeds.f", "cluster.service.s"),
        ("cluster.node.core", "cluster.deployment.dep"),
    ]
    assert private_reaches(modules) == [("cluster.feeds.f", 3, "dep._seq")]
