"""The engine's and the server's module graph with *every* import, also those inside functions.

``lint-imports`` sees function-level imports too, but a layer contract only forbids upward edges: two
modules of one layer (or a module and one no contract names) may still import each other, the cycle hidden
by a function-level import. This builds the graph from the source (imports under ``if TYPE_CHECKING:`` are
left out: they never run) and lists its cycles (strongly connected components of more than one module).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGES = ("skill/qnn_debug", "server/qnn_debug_mcp")


def _modules(root: Path) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        base = root / package
        for path in base.rglob("*.py"):
            parts = list(path.relative_to(base.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking_only(child):
                for other in child.orelse:
                    walk(other)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            walk(child)

    walk(tree)
    return found


def module_graph(root: Path) -> dict[str, set[str]]:
    """module → the project modules it imports (anywhere in its code)."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = package
                for _ in range(node.level - 1 if node.level else 0):
                    base = base.rpartition(".")[0]
                source = ".".join(p for p in (base if node.level else "", node.module or "") if p)
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
            for target in targets:
                while target and target not in modules:  # ``import a.b.c`` of a name inside a module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted, largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
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
                found.append(sorted(component))

    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found, key=len, reverse=True)


if __name__ == "__main__":
    import sys

    for c in cycles(module_graph(Path(sys.argv[1] if len(sys.argv) > 1 else "."))):
        print(len(c), " ".join(c))
