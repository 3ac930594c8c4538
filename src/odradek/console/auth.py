"""Who may use the console: a users file of scrypt-hashed passwords, sessions, CSRF tokens.

The console binds loopback by default and then needs no login. Listening anywhere else
needs ``--users FILE``: every page then asks for a login first. The file has one user a
line, ``name:scrypt:N:r:p:SALT:HASH`` (hex), written by ``odradek console passwd``; the
password is checked with ``hashlib.scrypt`` and a constant-time comparison.

Every visitor of a page gets a session (a random cookie, HttpOnly, SameSite=Strict) with
its own CSRF token; a mutation (a form POST, or a JSON POST with the ``X-CSRF-Token``
header) must carry that token, so another site cannot make a visitor's browser reset a
group's offsets. Sessions live in memory: a restart logs everybody out.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
HASH_BYTES = 32
SALT_BYTES = 16
SESSION_IDLE_S = 12 * 3600
MAX_SESSIONS = 10_000  # the oldest go first: visitors cannot grow memory without bound
COOKIE = "odradek_console"
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._@-")


class UsersFileError(Exception):
    """The users file cannot be read or has a bad line (the message names it)."""


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    salt = salt if salt is not None else os.urandom(SALT_BYTES)
    digest = hashlib.scrypt(
        password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=HASH_BYTES
    )
    return f"scrypt:{SCRYPT_N}:{SCRYPT_R}:{SCRYPT_P}:{salt.hex()}:{digest.hex()}"


def check_password(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split(":")
        if kind != "scrypt":
            return False
        expected = bytes.fromhex(digest)
        got = hashlib.scrypt(
            password.encode(),
            salt=bytes.fromhex(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(expected),
            maxmem=256 * 1024 * 1024,
        )
    except ValueError:
        return False
    return hmac.compare_digest(got, expected)


def check_name(name: str) -> str:
    if not name or not set(name) <= NAME_CHARS:
        raise UsersFileError(f"user names are letters, digits and . _ @ - only, got {name!r}")
    return name


def read_users(path: Path) -> dict[str, str]:
    """name -> stored hash."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsersFileError(f"{path}: {exc.strerror or exc}") from None
    users: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, stored = line.partition(":")
        if not sep or not stored.startswith("scrypt:") or len(stored.split(":")) != 6:
            raise UsersFileError(
                f"{path}:{number}: expected name:scrypt:N:r:p:salt:hash "
                "(written by 'odradek console passwd')"
            )
        users[check_name(name)] = stored
    return users


def write_user(path: Path, name: str, password: str) -> bool:
    """Add or replace ``name``'s line; True when the user is new. The file is written
    whole to a temporary file first and readable by its owner only."""
    check_name(name)
    lines = path.read_text().splitlines() if path.exists() else []
    entry = f"{name}:{hash_password(password)}"
    new = True
    for i, line in enumerate(lines):
        if line.partition(":")[0] == name:
            lines[i], new = entry, False
    if new:
        lines.append(entry)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return new


@dataclass(slots=True)
class Session:
    token: str
    csrf: str
    user: str | None
    last_seen: float


class Sessions:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def get(self, token: str | None) -> Session | None:
        if not token:
            return None
        now = time.monotonic()
        with self._lock:
            s = self._sessions.get(token)
            if s is None:
                return None
            if now - s.last_seen > SESSION_IDLE_S:
                del self._sessions[token]
                return None
            s.last_seen = now
            self._sessions.move_to_end(token)
            return s

    def new(self, user: str | None = None) -> Session:
        s = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), user, time.monotonic())
        with self._lock:
            self._sessions[s.token] = s
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return s

    def drop(self, token: str) -> None:
        with self._lock:
            self._sessions.pop(token, None)


def csrf_ok(session: Session | None, token: str | None) -> bool:
    return session is not None and bool(token) and hmac.compare_digest(session.csrf, str(token))
