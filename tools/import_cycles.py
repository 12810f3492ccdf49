"""Import circles and private names taken across modules, read from the source with ``ast``.

    python tools/import_cycles.py src bunko          # prints each circle and each private import; exit 1 if any

Every import counts, at the top of a module or inside a function, except those under
``if TYPE_CHECKING:`` (they never run). A module imports what it names: ``from . import x`` names the
submodule ``x`` when there is one, ``from .a import b`` names ``a.b`` when that is a module and ``a``
otherwise. Parent packages imported implicitly are not counted, as import-linter does not count them.

A private name is one that starts with ``_`` (not a dunder) taken from another module of the package,
by ``from m import _name`` or as ``m._name`` on an imported module.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` under ``root``: dotted name to file."""
    found: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk_runtime(node: ast.AST) -> Iterator[ast.AST]:
    """Every node below ``node`` except the bodies of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield other
                yield from _walk_runtime(other)
            continue
        yield child
        yield from _walk_runtime(child)


def _absolute(module: str, is_package: bool, level: int, target: str | None) -> str:
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, *([target] if target else [])])


def read_imports(name: str, path: Path, known: dict[str, Path]) -> tuple[set[str], list[str]]:
    """The package modules ``name`` imports, and the private names it takes from them."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    imported: set[str] = set()
    private: list[str] = []
    aliases: dict[str, str] = {}  # local name -> package module, for m._name
    for node in _walk_runtime(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    imported.add(alias.name)
                    aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(name, is_package, node.level, node.module) if node.level else (node.module or "")
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in known:
                    imported.add(submodule)
                    aliases[alias.asname or alias.name] = submodule
                elif source in known:
                    imported.add(source)
                    if alias.name.startswith("_") and not alias.name.startswith("__") and source != name:
                        private.append(f"{name} takes {alias.name} from {source}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            target = aliases.get(node.value.id)
            if target and target != name and node.attr.startswith("_") and not node.attr.startswith("__"):
                private.append(f"{name} uses {target}.{node.attr}")
    imported.discard(name)
    return imported, private


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found, key=lambda c: (-len(c), c))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    root, package = Path(argv[0]), argv[1]
    known = modules(root, package)
    graph: dict[str, set[str]] = {}
    private: list[str] = []
    for name, path in known.items():
        graph[name], taken = read_imports(name, path, known)
        private += taken
    found = circles(graph)
    for component in found:
        print(f"circle of {len(component)}: {', '.join(component)}")
    for line in sorted(private):
        print(f"private: {line}")
    if not found and not private:
        print(f"no import circle and no private import in {len(known)} modules")
    return 1 if found or private else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
