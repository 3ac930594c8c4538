"""The floors of issue 20 (docs/architecture.md, "The floors"), held by the imports.

* The broker never imports the etcd shell (`odradek.cluster`), the development
  launcher (`odradek.devcluster`) or the wiring that picks a control plane; and it
  does not ask which control plane it has: no mode test in its modules.
* The replica layer (`odradek.replication`) stands on the log and the protocol only.
* Only the commands and the tests use the development launcher.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import odradek

ROOT = Path(odradek.__file__).parent


def _imports(path: Path) -> set[str]:
    """Every odradek module a file imports, wherever the import is (functions and
    TYPE_CHECKING blocks included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {name for name in found if name.startswith("odradek")}


def _code_lines(path: Path) -> dict[int, str]:
    """The file's code, line by line, without its strings and comments."""
    lines: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type in (tokenize.STRING, tokenize.COMMENT):
            continue
        line = token.start[0]
        lines[line] = lines.get(line, "") + token.string + " "
    return lines


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _importing(package: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    offenders = {}
    for path in _modules(package):
        bad = sorted(
            name for name in _imports(path) if name.startswith(forbidden) or name in forbidden
        )
        if bad:
            offenders[str(path.relative_to(ROOT))] = bad
    return offenders


def test_the_broker_imports_neither_the_etcd_shell_nor_its_wiring() -> None:
    forbidden = ("odradek.cluster", "odradek.devcluster", "odradek.wiring")
    assert _importing("broker", forbidden) == {}


def test_the_replica_layer_stands_on_the_log_and_the_protocol_only() -> None:
    allowed = ("odradek.log", "odradek.protocol", "odradek.replication")
    offenders = {
        str(path.relative_to(ROOT)): sorted(n for n in _imports(path) if not n.startswith(allowed))
        for path in _modules("replication")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_no_broker_module_asks_which_control_plane_it_has() -> None:
    """No ``cluster is not None``, no cluster-mode flag, no look at etcd.endpoints (the
    setting's one cross-check stays with the other settings' checks, in config.py)."""
    mode_test = re.compile(r"\. cluster\b|cluster_mode|etcd\.endpoints|ClusterNode")
    offenders = {}
    for path in _modules("broker"):
        name = str(path.relative_to(ROOT))
        if name == "broker/config.py":
            continue
        lines = [f"{n}: {code}" for n, code in _code_lines(path).items() if mode_test.search(code)]
        if lines:
            offenders[name] = lines
    assert offenders == {}


def test_only_the_commands_use_the_development_launcher() -> None:
    users = {
        str(path.relative_to(ROOT))
        for path in ROOT.rglob("*.py")
        if any(name.startswith("odradek.devcluster") for name in _imports(path))
    }
    assert {u for u in users if not u.startswith(("cli/", "devcluster/"))} == set()
