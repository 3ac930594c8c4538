"""Where the security state lives: small JSON files in ``<data dir>/security/``, each
replaced atomically (write, fsync, rename, fsync the directory) like the topic
metadata, so a crash leaves the old or the new version and never a torn file."""

from __future__ import annotations

from odradek.broker.topic_store import write_json_atomically

SECURITY_DIR = "security"

__all__ = ["SECURITY_DIR", "write_json_atomically"]
