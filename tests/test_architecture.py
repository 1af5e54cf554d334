"""The shape of the code (docs/architecture.md): imports of ``src/hista`` run one way (no circle,
function-level imports included, and no import from a lower layer to a higher one), no private
name is imported across modules, ``hista --help`` imports no torch, and every "SPEC §" citation
names a section of the in-repo design document (docs/spec.md), and the scripts of results/ and
scripts/ use hista's public names only."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
SPEC = ROOT / "docs" / "spec.md"

#: the layers of docs/architecture.md, from the ground up: a module imports only from its own part
#: of ``hista`` or from a lower layer; the parts of layer 1 (shared vocabulary) may import each other
LAYERS = {
    1: {"hista", "errors", "types", "registry", "hub", "jsonio", "yamlio", "schema", "sharding", "bootstrap",
        "provenance"},
    2: {"models", "rewards", "estimators", "losses"},
    3: {"tasks", "rollout", "critic"},
    4: {"advantages"},
    5: {"sveb", "evaluation"},
    6: {"train"},
    7: {"integrations"},
    8: {"cli"},
}
LAYER_OF = {part: layer for layer, parts in LAYERS.items() for part in parts}


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of src/hista (a package is its __init__)."""
    out = {}
    for path in (SRC / "hista").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str:
    """The module of ``MODULES`` that a dotted import target names (a name inside a module is
    its module)."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _imports(module: str, path: Path) -> list[tuple[str, str, int]]:
    """(imported module, imported name or '', line) of every import of ``hista`` in a module,
    at any depth of the file (function-level imports included)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(_resolve(a.name), "", node.lineno) for a in node.names if a.name.split(".")[0] == "hista"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "hista":
                continue
            for alias in node.names:
                full = f"{target}.{alias.name}"
                if full in MODULES:  # a submodule
                    found.append((full, "", node.lineno))
                else:
                    found.append((_resolve(target), alias.name, node.lineno))
    return found


EDGES = {m: _imports(m, p) for m, p in MODULES.items()}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "hista"


def test_every_part_of_hista_has_a_layer():
    assert {_part(m) for m in MODULES} - set(LAYER_OF) == set()


def test_the_import_graph_has_no_circle():
    """Tarjan's strongly connected components over module imports; a function-level import that
    closes a loop is still a loop."""
    graph = {m: sorted({t for t, _, _ in edges if t != m}) for m, edges in EDGES.items()}
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in graph:
        if v not in index:
            visit(v)
    assert circles == []


def test_imports_run_down_the_layers():
    wrong = []
    for module, edges in EDGES.items():
        source = _part(module)
        for target, _, line in edges:
            dest = _part(target)
            if dest == source:
                continue
            below = LAYER_OF[dest] < LAYER_OF[source]
            vocabulary = LAYER_OF[dest] == LAYER_OF[source] == 1
            if not (below or vocabulary):
                wrong.append(f"{MODULES[module].relative_to(ROOT)}:{line}: {module} (layer {LAYER_OF[source]}) "
                             f"imports {target} (layer {LAYER_OF[dest]})")
    assert wrong == []


def test_no_private_name_is_imported_across_modules():
    """A name with a leading underscore is private to its module (dunder names such as
    ``__version__`` are not private)."""
    wrong = [f"{MODULES[m].relative_to(ROOT)}:{line}: {name} from {target}"
             for m, edges in EDGES.items() for target, name, line in edges
             if _private(name) and target != m]
    assert wrong == []


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_tests_use_public_names():
    """Tests import no private name of hista, read none off a hista module and monkeypatch none
    (fixtures and public names only)."""
    wrong = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = {a.asname or a.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                   for a in node.names if a.name.startswith("hista")}
        modules |= {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                    and (node.module or "").startswith("hista") for a in node.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hista"):
                wrong += [f"{path.name}:{node.lineno}: imports {a.name}" for a in node.names if _private(a.name)]
            if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                    and node.value.id in modules):
                wrong.append(f"{path.name}:{node.lineno}: reads {node.value.id}.{node.attr}")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "setattr"
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                    and isinstance(node.args[1].value, str) and _private(node.args[1].value)):
                wrong.append(f"{path.name}:{node.lineno}: monkeypatches {node.args[1].value}")
    assert wrong == []


def _public(module: str) -> Optional[set[str]]:
    """The public names of a hista module: its ``__all__`` (None when it declares none, which
    makes the whole module internal)."""
    names = getattr(importlib.import_module(module), "__all__", None)
    return None if names is None else set(names)


def test_results_and_scripts_use_the_public_api():
    """Issue 67 item 8: the scripts of results/ and scripts/ import from hista only what a
    module's ``__all__`` offers (a package's face, or a module that declares one), so that no
    internal module is kept alive for them."""
    wrong = []
    for path in sorted([*(ROOT / "results").rglob("*.py"), *(ROOT / "scripts").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(ROOT)}:{node.lineno if hasattr(node, 'lineno') else 0}"
            if isinstance(node, ast.Import):
                wrong += [f"{where}: import {a.name}" for a in node.names
                          if a.name.startswith("hista.") and _public(a.name) is None]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "hista":
                offered = _public(node.module) if node.module != "hista" else set()
                for alias in node.names:
                    module = f"{node.module}.{alias.name}"
                    parent = importlib.import_module(node.module)
                    is_module = hasattr(parent, "__path__") and importlib.util.find_spec(module) is not None
                    if is_module and _public(module) is not None:
                        continue  # a module that declares its public names
                    if offered is None or alias.name not in offered:
                        wrong.append(f"{where}: {alias.name} from {node.module}")
    assert wrong == []


def test_hista_help_imports_no_torch():
    code = ("import sys\nfrom hista.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[-2:] == ["False", "False"], out


def _spec_sections() -> set[str]:
    return set(re.findall(r"^#{2,3} §(\d+(?:\.\d+)?) ", SPEC.read_text(encoding="utf-8"), flags=re.M))


#: "SPEC §8", "SPEC §4.5, §8", "SPEC §8 ``report``, §11", "SPEC §9 and §11"
CITATION = re.compile(r"SPEC\s+§(\d+(?:\.\d+)?)((?:[^§\n]{0,40}?(?:,|\band\b|\bor\b)\s*§\d+(?:\.\d+)?)*)")


def _cited(text: str) -> list[str]:
    out = []
    for first, rest in CITATION.findall(text):
        out += [first, *re.findall(r"§(\d+(?:\.\d+)?)", rest)]
    return out


def test_the_design_document_has_the_sections_the_code_cites():
    sections = _spec_sections()
    assert {"1", "4", "4.3", "8", "12"} <= sections
    files = [*SRC.rglob("*.py"), *(ROOT / "docs").glob("*.md"), ROOT / "README.md", ROOT / "CONTRIBUTING.md",
             *(ROOT / "bench").glob("*.py"), *(ROOT / "tests").rglob("*.py")]
    missing, count = [], 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        for section in _cited(text):
            count += 1
            if section not in sections:
                missing.append(f"{path.relative_to(ROOT)}: §{section}")
        if path.suffix == ".py" and path.is_relative_to(SRC):  # a bare § in a docstring is a SPEC section too
            for match in re.finditer(r"(?<!paper )§(\d+(?:\.\d+)?)", text):
                if match.group(1) not in sections:
                    missing.append(f"{path.relative_to(ROOT)}: bare §{match.group(1)}")
    assert count > 300 and missing == []


@pytest.mark.parametrize("text, cited", [
    ("(SPEC §4.5, §8)", ["4.5", "8"]),
    ("SPEC §8 ``report``, §11 output files", ["8", "11"]),
    ("(SPEC §4.3; paper §5.2)", ["4.3"]),
    ("SPEC §9 and §11", ["9", "11"]),
])
def test_citations_are_read_as_written(text, cited):
    assert _cited(text) == cited


def test_relative_links_of_the_docs_resolve():
    """Every relative link of the README, CONTRIBUTING, CHANGELOG, docs/ and results/ READMEs
    names a file of the repository (the design and the study artifacts moved: nothing dangles)."""
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md"),
             *(ROOT / "results").glob("*/README.md"), ROOT / "results" / "README.md"]
    dangling = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if not re.match(r"[a-z]+:", target) and not (page.parent / target).exists():
                dangling.append(f"{page.relative_to(ROOT)}: {target}")
    assert dangling == []
