"""SCRAM credentials: the salted keys of each user, never a password.

Kept in ``<data dir>/security/scram-credentials.json`` (replaced atomically on
each change), one entry per (user, mechanism) with the salt, StoredKey,
ServerKey and iteration count, as Kafka keeps them in its metadata log.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from odradek.broker.security.store import SaveQueue, write_json_atomically
from odradek.protocol.scram import (
    DEFAULT_ITERATIONS,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramError,
    ScramMechanism,
    mechanism,
)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


T = TypeVar("T")


def _credentials(document: dict[str, Any]) -> dict[tuple[str, str], ScramCredential]:
    return {
        (entry["user"], entry["mechanism"]): ScramCredential(
            base64.b64decode(entry["salt"]),
            base64.b64decode(entry["stored_key"]),
            base64.b64decode(entry["server_key"]),
            int(entry["iterations"]),
        )
        for entry in document.get("credentials", [])
    }


def _document(credentials: Mapping[tuple[str, str], ScramCredential]) -> dict[str, Any]:
    entries = [
        {
            "user": user,
            "mechanism": mech,
            "salt": _b64(c.salt),
            "stored_key": _b64(c.stored_key),
            "server_key": _b64(c.server_key),
            "iterations": c.iterations,
        }
        for (user, mech), c in sorted(credentials.items())
    ]
    return {"credentials": entries}


class ScramCredentialStore:
    """Users' SCRAM credentials, by (user, mechanism name).

    Every change writes the file first and then makes the new credentials current;
    ``change`` runs one off the event loop (see store.py).
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path  # None: a detached copy (cluster mode edits a document with it)
        self._lock = threading.Lock()  # one change (and its file write) at a time
        self._saves = SaveQueue()
        self._credentials: dict[tuple[str, str], ScramCredential] = {}
        if path is not None and path.exists():
            self._credentials = _credentials(json.loads(path.read_text()))

    @classmethod
    def detached(cls, document: dict[str, Any]) -> ScramCredentialStore:
        """A store holding `document` that writes no file (to compute a change)."""
        store = cls(None)
        store._credentials = _credentials(document)
        return store

    def to_document(self) -> dict[str, Any]:
        return _document(self._credentials)

    def load_document(self, document: dict[str, Any]) -> None:
        """Take the cluster's credentials (cluster mode: what etcd holds), keeping a copy."""
        with self._lock:
            self._commit(_credentials(document))

    async def change(self, edit: Callable[[ScramCredentialStore], T]) -> T:
        """``edit(self)`` (``apply``) with its save in a worker thread, after the changes
        asked for before it (see store.py)."""
        return await self._saves.run(lambda: edit(self))

    def _commit(self, credentials: dict[tuple[str, str], ScramCredential]) -> None:
        """Lock held: persist ``credentials``, then make them the current ones."""
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomically(self.path, _document(credentials))
        self._credentials = credentials

    def get(self, user: str, mech: ScramMechanism) -> ScramCredential | None:
        return self._credentials.get((user, mech.name))

    def users(self) -> dict[str, dict[str, int]]:
        """user -> {mechanism name: iterations}."""
        out: dict[str, dict[str, int]] = {}
        for (user, mech), credential in sorted(self._credentials.items()):
            out.setdefault(user, {})[mech] = credential.iterations
        return out

    def apply(
        self,
        upserts: list[tuple[str, ScramMechanism, ScramCredential]],
        deletions: list[tuple[str, ScramMechanism]],
    ) -> None:
        """Apply a batch of changes and persist once."""
        with self._lock:
            credentials = dict(self._credentials)
            for user, mech in deletions:
                credentials.pop((user, mech.name), None)
            for user, mech, credential in upserts:
                credentials[(user, mech.name)] = credential
            self._commit(credentials)


def check_iterations(iterations: int) -> None:
    if iterations < MIN_ITERATIONS:
        raise ScramError(f"Too few iterations ({iterations}; at least {MIN_ITERATIONS})")
    if iterations > MAX_ITERATIONS:
        raise ScramError(f"Too many iterations ({iterations}; at most {MAX_ITERATIONS})")


@dataclass(frozen=True, slots=True)
class InitialScramUser:
    """One ``--add-scram`` argument (the format of Kafka's ``kafka-storage --add-scram``)."""

    mechanism: ScramMechanism
    name: str
    password: str
    iterations: int

    def __repr__(self) -> str:  # never show the password
        return f"InitialScramUser({self.mechanism.name}, {self.name!r}, {self.iterations})"

    def credential(self) -> ScramCredential:
        return ScramCredential.from_password(self.mechanism, self.password, self.iterations)


_ADD_SCRAM = re.compile(r"^\s*([A-Za-z0-9-]+)\s*=\s*\[(.*)\]\s*$", re.S)


def _split_fields(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        key_end = text.find("=", pos)
        if key_end < 0:
            raise ScramError(f"expected key=value in {text[pos:]!r}")
        key = text[pos:key_end].strip().lower()
        pos = key_end + 1
        if pos < len(text) and text[pos] == '"':
            end = text.find('"', pos + 1)
            if end < 0:
                raise ScramError(f"unterminated quote after {key}=")
            value = text[pos + 1 : end]
            pos = end + 1
            if pos < len(text) and text[pos] != ",":
                raise ScramError(f"expected ',' after the quoted {key}")
        else:
            end = text.find(",", pos)
            end = len(text) if end < 0 else end
            value = text[pos:end].strip()
            pos = end
        fields[key] = value
        pos += 1  # the comma
    return fields


def parse_add_scram(text: str) -> InitialScramUser:
    """``SCRAM-SHA-512=[name=admin,password=admin-secret]`` (``iterations=N`` optional)."""
    match = _ADD_SCRAM.match(text)
    if match is None:
        raise ScramError(
            "--add-scram expects MECHANISM=[name=NAME,password=PASSWORD], "
            "e.g. 'SCRAM-SHA-512=[name=admin,password=admin-secret]'"
        )
    mech = mechanism(match.group(1))
    fields = _split_fields(match.group(2))
    unknown = set(fields) - {"name", "password", "iterations"}
    if unknown:
        raise ScramError(f"--add-scram: unknown field(s) {', '.join(sorted(unknown))}")
    name = fields.get("name", "")
    password = fields.get("password", "")
    if not name or not password:
        raise ScramError("--add-scram needs name= and password=")
    try:
        iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
    except ValueError:
        raise ScramError("--add-scram: iterations must be a number") from None
    check_iterations(iterations)
    return InitialScramUser(mech, name, password, iterations)
