"""The floors of the house (docs/architecture.md, "The floors"), held by the imports.

* No import circle in ``src/odradek``, except the ones listed in ``ALLOWED`` (which
  only shrinks: an entry whose import is gone fails the test until it is removed).
* The broker never imports the etcd shell (`odradek.cluster`), the development
  launcher (`odradek.devcluster`) or the wiring that picks a control plane; and it
  does not ask which control plane it has: no mode test in its modules.
* The replica layer (`odradek.replication`) stands on the log and the protocol only.
* Only the commands use the development launcher.

Every ``import`` counts, wherever it is: at module level, inside a function, under
``if TYPE_CHECKING`` (a type-only import still ties the two modules' designs together).
``from package import name`` is an import of ``package.name`` when that is a module,
else of ``package``, as Python resolves it.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from pathlib import Path

import odradek

ROOT = Path(odradek.__file__).parent

# (importer, imported) edges left out of the graph, each with why. A name ending in
# ".*" stands for every module of that package.
ALLOWED: dict[tuple[str, str], str] = {
    (
        "odradek.broker.server",
        "odradek.broker.apis",
    ): "the handler registry: importing the package registers every handler",
}


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the odradek modules it imports (see module docs)."""
    modules = {_module_name(p)[0]: p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".")[: None if is_package else -1]
                    base = base[: len(base) - node.level + 1]
                    package = ".".join(base + ([node.module] if node.module else []))
                else:
                    package = node.module or ""
                for alias in node.names:
                    sub = f"{package}.{alias.name}"
                    targets.add(sub if sub in modules else package)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _matches(pattern: str, module: str) -> bool:
    if pattern.endswith(".*"):
        return module.startswith(pattern[:-1])
    return module == pattern


def _allowed(importer: str, imported: str) -> bool:
    return any(_matches(a, importer) and _matches(b, imported) for a, b in ALLOWED)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_outside_the_allowlist() -> None:
    graph = import_graph()
    kept = {m: {t for t in ts if not _allowed(m, t)} for m, ts in graph.items()}
    found = cycles(kept)
    report = ["; ".join(f"{a} -> {b}" for a in c for b in sorted(kept[a]) if b in c) for c in found]
    assert not found, "import circles:\n" + "\n".join(report)


def test_every_allowed_import_still_exists() -> None:
    """The allowlist only shrinks: drop an entry once its import is gone."""
    graph = import_graph()
    stale = [
        (a, b)
        for a, b in ALLOWED
        if not any(_matches(a, m) and any(_matches(b, t) for t in ts) for m, ts in graph.items())
    ]
    assert not stale, f"allowed imports that no longer exist (remove them): {stale}"


def test_the_graph_sees_function_level_and_type_only_imports() -> None:
    graph = import_graph()
    assert "odradek.broker.server" in graph["odradek.cli.serve"]  # inside a function
    assert "odradek.client.config" in graph["odradek.client.security"]  # TYPE_CHECKING only
    assert "odradek.broker.apis" in graph["odradek.broker.server"]  # from ... import apis
    # A cycle is found when there is one.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# --- the floors -------------------------------------------------------------------------


def _imported_by(package: str) -> dict[str, set[str]]:
    """Each module of ``odradek.<package>`` -> the odradek modules it imports."""
    prefix = f"odradek.{package}"
    return {m: ts for m, ts in import_graph().items() if m == prefix or m.startswith(prefix + ".")}


def _offenders(package: str, bad: tuple[str, ...]) -> dict[str, list[str]]:
    found = {
        m: sorted(t for t in ts if t.startswith(bad)) for m, ts in _imported_by(package).items()
    }
    return {m: ts for m, ts in found.items() if ts}


def test_the_broker_imports_neither_the_etcd_shell_nor_its_wiring() -> None:
    assert _offenders("broker", ("odradek.cluster", "odradek.devcluster", "odradek.wiring")) == {}


def test_the_replica_layer_stands_on_the_log_and_the_protocol_only() -> None:
    allowed = ("odradek.log", "odradek.protocol", "odradek.replication")
    found = {
        m: sorted(t for t in ts if not t.startswith(allowed))
        for m, ts in _imported_by("replication").items()
    }
    assert {m: ts for m, ts in found.items() if ts} == {}


def _code_lines(path: Path) -> dict[int, str]:
    """The file's code, line by line, without its strings and comments."""
    lines: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type in (tokenize.STRING, tokenize.COMMENT):
            continue
        line = token.start[0]
        lines[line] = lines.get(line, "") + token.string + " "
    return lines


def test_no_broker_module_asks_which_control_plane_it_has() -> None:
    """No ``cluster is not None``, no cluster-mode flag, no look at etcd.endpoints (the
    setting's one cross-check stays with the other settings' checks, in config.py)."""
    mode_test = re.compile(r"\. cluster\b|cluster_mode|etcd\.endpoints|ClusterNode")
    offenders = {}
    for path in sorted((ROOT / "broker").rglob("*.py")):
        name = str(path.relative_to(ROOT))
        if name == "broker/config.py":
            continue
        lines = [f"{n}: {code}" for n, code in _code_lines(path).items() if mode_test.search(code)]
        if lines:
            offenders[name] = lines
    assert offenders == {}


def test_only_the_commands_use_the_development_launcher() -> None:
    users = {
        m for m, ts in import_graph().items() if any(t.startswith("odradek.devcluster") for t in ts)
    }
    assert {u for u in users if not u.startswith(("odradek.cli.", "odradek.devcluster"))} == set()
