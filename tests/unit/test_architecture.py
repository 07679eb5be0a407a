"""The floor plan holds: no import circle, each stage imports only what it may,
and no module or function grows past what a reader takes in at once."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.fixtures.paths import ROOT

PACKAGE = ROOT / "lockwatch"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60

# A stage may import only these (and itself); model and text import no stage.
ALLOWED = {
    "model": {"model", "text"},
    "settings": {"settings", "model", "util"},
    "detect": {"detect", "model", "settings", "text"},
    "sample": {"sample", "model", "settings", "util", "text"},
    "state": {"state", "model", "settings", "util", "text"},
    "monitors": {"monitors", "sample", "detect", "state", "model", "settings", "text"},
    "publish": {"publish", "state", "model", "settings", "util", "text"},
    "notify": {"notify", "state", "model", "settings", "util", "text"},
    "util": {"util"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(path): path for path in package.rglob("*.py")}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Every lockwatch module ``path`` imports, at its top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name in known and "." in name}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    known = modules(package)
    names = set(known)
    return {name: imports_of(path, names) - {name} for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            part = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                part.append(member)
                if member == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else parts[-1]


def test_circles_are_found_when_there_are_some() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_package_takes_part_in_an_import_circle() -> None:
    assert circles(import_graph()) == []


def test_no_module_of_the_benchmarks_takes_part_in_an_import_circle() -> None:
    """bench/ too: a report that imports the run that imports the measurement
    that imports the report again was how its commands first grew."""
    assert circles(import_graph(ROOT / "bench")) == []


def test_each_stage_imports_only_the_stages_below_it() -> None:
    wrong = [
        f"{module} imports {other}"
        for module, imported in sorted(import_graph().items())
        if stage(module) in ALLOWED
        for other in sorted(imported)
        if stage(other) not in ALLOWED[stage(module)]
    ]
    assert wrong == []


def test_no_detector_nor_state_module_can_read_what_is_watched() -> None:
    """A poll judges what it sampled: detectors and the state's books (the
    ledger, the incidents) never reach a sampler, so judgement does no I/O
    towards a target (tests/integration/test_poll_steps.py checks the order)."""
    wrong = [
        f"{module} imports {other}"
        for module, imported in sorted(import_graph().items())
        if stage(module) in {"detect", "state"}
        for other in sorted(imported)
        if stage(other) == "sample"
    ]
    assert wrong == []


def test_the_sampling_framework_imports_no_sampler() -> None:
    assert {
        m for m in import_graph()["lockwatch.sample.base"] if m.startswith("lockwatch.sample")
    } == set()


def functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def test_no_module_is_longer_than_a_reader_takes_in() -> None:
    long = {
        name: lines
        for name, path in modules().items()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_function_is_longer_than_a_screen() -> None:
    long = {
        f"{name}.{function.name}": length
        for name, path in modules().items()
        for function in functions(ast.parse(path.read_text(encoding="utf-8")))
        if (length := (function.end_lineno or function.lineno) - function.lineno + 1)
        > MAX_FUNCTION_LINES
    }
    assert long == {}
