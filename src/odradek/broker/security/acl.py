"""Kafka's ACL model and its StandardAuthorizer's decision rules.

An ACL binds a resource pattern (type, name, LITERAL or PREFIXED) to an entry
(principal, host, operation, ALLOW or DENY). A request is allowed when:

* the principal is a super user (``super.users``), else
* no DENY ACL matches, and an ALLOW ACL matches, else
* no ACL at all exists for the resource and ``allow.everyone.if.no.acl.found``.

An ACL matches when its principal is the request's or ``User:*``, its host is
the client's address or ``*``, its operation is the one asked or ALL, and its
pattern covers the resource (LITERAL: equal name or the wildcard ``*``;
PREFIXED: a prefix of the name). ALLOW ACLs for READ, WRITE, DELETE or ALTER
also allow DESCRIBE, and ALTER_CONFIGS allows DESCRIBE_CONFIGS; DENY ACLs imply
nothing. Codes are Kafka's (``AclOperation``, ``ResourceType``, ...), so the
wire APIs carry them unchanged.
"""

from __future__ import annotations

import enum
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from odradek.broker.security.principal import KafkaPrincipal, PrincipalError
from odradek.broker.security.store import SaveQueue, write_json_atomically
from odradek.protocol.acl import (
    CLUSTER_NAME,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)

WILDCARD = "*"

T = TypeVar("T")


class AclError(ValueError):
    """An ACL or filter that cannot be used, with the Kafka error code to answer."""

    def __init__(self, message: str, error_code: int = 42) -> None:  # INVALID_REQUEST
        super().__init__(message)
        self.error_code = error_code


Op = AclOperation
Resource = ResourceType

# Kafka's AclEntry.supportedOperations: what authorized_operations reports on.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    Resource.TOPIC: (
        Op.READ,
        Op.WRITE,
        Op.CREATE,
        Op.DESCRIBE,
        Op.DELETE,
        Op.ALTER,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
    ),
    Resource.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    Resource.CLUSTER: (
        Op.CREATE,
        Op.CLUSTER_ACTION,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
        Op.IDEMPOTENT_WRITE,
        Op.ALTER,
        Op.DESCRIBE,
    ),
    Resource.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
    Resource.DELEGATION_TOKEN: (Op.DESCRIBE,),
    Resource.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}

_IMPLIES_DESCRIBE = frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS})


def _enum_name(kind: type[enum.IntEnum], code: int) -> str:
    try:
        return kind(code).name
    except ValueError:
        return str(code)


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def __str__(self) -> str:
        return (
            f"{_enum_name(AclPermission, self.permission)} {self.principal} "
            f"{_enum_name(AclOperation, self.operation)} on "
            f"{_enum_name(ResourceType, self.resource_type)}:"
            f"{_enum_name(PatternType, self.pattern_type)}:{self.resource_name} "
            f"from {self.host}"
        )

    def validate(self) -> None:
        """Kafka's checks for a new ACL (CreateAcls), raising AclError."""
        if self.resource_type in (Resource.UNKNOWN, Resource.ANY) or not _known(
            ResourceType, self.resource_type
        ):
            raise AclError(f"resource type {self.resource_type} is not a concrete type")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError("pattern type must be LITERAL or PREFIXED")
        if self.operation in (Op.UNKNOWN, Op.ANY) or not _known(AclOperation, self.operation):
            raise AclError(f"operation {self.operation} is not a concrete operation")
        if self.permission not in (AclPermission.ALLOW, AclPermission.DENY):
            raise AclError("permission must be ALLOW or DENY")
        if not self.resource_name:
            raise AclError("Invalid empty resource name")
        if self.resource_type == Resource.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        if self.pattern_type == PatternType.PREFIXED and self.resource_name == WILDCARD:
            raise AclError("a PREFIXED pattern cannot be the wildcard '*'")
        try:
            KafkaPrincipal.parse(self.principal)
        except PrincipalError as exc:
            raise AclError(str(exc)) from None
        if not self.host:
            raise AclError("host must be an address or '*'")

    def covers(self, name: str) -> bool:
        """Whether this ACL's resource pattern applies to resource ``name``."""
        if self.pattern_type == PatternType.LITERAL:
            return self.resource_name in (name, WILDCARD)
        return name.startswith(self.resource_name)


def _known(kind: type[enum.IntEnum], code: int) -> bool:
    return code in kind._value2member_map_


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls / DeleteAcls filter: None or ANY fields match everything."""

    resource_type: int = Resource.ANY
    resource_name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = Op.ANY
    permission: int = AclPermission.ANY

    def validate(self) -> None:
        if self.resource_type == Resource.UNKNOWN or not _known(ResourceType, self.resource_type):
            raise AclError(f"unknown resource type {self.resource_type} in a filter")
        if self.pattern_type == PatternType.UNKNOWN or not _known(PatternType, self.pattern_type):
            raise AclError(f"unknown pattern type {self.pattern_type} in a filter")
        if self.operation == Op.UNKNOWN or not _known(AclOperation, self.operation):
            raise AclError(f"unknown operation {self.operation} in a filter")
        if self.permission == AclPermission.UNKNOWN or not _known(AclPermission, self.permission):
            raise AclError(f"unknown permission {self.permission} in a filter")

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != Resource.ANY and acl.resource_type != self.resource_type:
            return False
        if not self._pattern_matches(acl):
            return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation != Op.ANY and acl.operation != self.operation:
            return False
        return self.permission == AclPermission.ANY or acl.permission == self.permission

    def _pattern_matches(self, acl: AclBinding) -> bool:
        if self.pattern_type == PatternType.MATCH:
            # Every ACL that would apply to a resource of that (literal) name.
            return self.resource_name is None or acl.covers(self.resource_name)
        if self.pattern_type != PatternType.ANY and acl.pattern_type != self.pattern_type:
            return False
        return self.resource_name is None or acl.resource_name == self.resource_name


def _operation_matches(acl: AclBinding, operation: AclOperation) -> bool:
    if acl.operation == Op.ALL or acl.operation == operation:
        return True
    if acl.permission != AclPermission.ALLOW:
        return False
    if operation == Op.DESCRIBE:
        return acl.operation in _IMPLIES_DESCRIBE
    if operation == Op.DESCRIBE_CONFIGS:
        return acl.operation in _IMPLIES_DESCRIBE_CONFIGS
    return False


def _bindings(document: dict[str, Any]) -> list[AclBinding]:
    return [AclBinding(**entry) for entry in document.get("acls", [])]


def _document(acls: Iterable[AclBinding]) -> dict[str, Any]:
    return {"acls": [asdict(a) for a in acls]}


class AclStore:
    """The ACLs of this node, kept in ``acls.json`` (replaced atomically on change).

    Every change writes the file first and then makes the new list current (readers
    never see ACLs that are not on disk yet); ``change`` runs one off the event loop.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path  # None: a detached copy (cluster mode edits a document with it)
        self._lock = threading.Lock()  # one change (and its file write) at a time
        self._saves = SaveQueue()
        self._acls: list[AclBinding] = []
        self.version = 0  # bumps on every change, so decision caches can notice
        if path is not None and path.exists():
            self._acls = _bindings(json.loads(path.read_text()))

    @classmethod
    def detached(cls, document: dict[str, Any]) -> AclStore:
        """A store holding `document` that writes no file (to compute a change)."""
        store = cls(None)
        store._acls = _bindings(document)
        return store

    def to_document(self) -> dict[str, Any]:
        return _document(self._acls)

    def load_document(self, document: dict[str, Any]) -> None:
        """Take the cluster's ACLs (cluster mode: what etcd holds), keeping a local copy."""
        with self._lock:
            self._commit(_bindings(document))

    async def change(self, edit: Callable[[AclStore], T]) -> T:
        """``edit(self)`` (``add`` / ``remove``) with its save in a worker thread, after
        the changes asked for before it (see store.py)."""
        return await self._saves.run(lambda: edit(self))

    def __iter__(self) -> Any:
        return iter(list(self._acls))

    def __len__(self) -> int:
        return len(self._acls)

    def _commit(self, acls: list[AclBinding]) -> None:
        """Lock held: persist ``acls``, then make them the current ones."""
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomically(self.path, _document(acls))
        self._acls = acls
        self.version += 1

    def add(self, acls: Iterable[AclBinding]) -> None:
        """Add ACLs (existing ones are kept once), then persist."""
        with self._lock:
            added = list(self._acls)
            present = set(added)
            for acl in acls:
                if acl not in present:
                    added.append(acl)
                    present.add(acl)
            self._commit(added)

    def remove(self, filters: Iterable[AclFilter]) -> list[list[AclBinding]]:
        """Delete every ACL each filter matches; the deleted ones, per filter."""
        with self._lock:
            results: list[list[AclBinding]] = []
            remaining = list(self._acls)
            for flt in filters:
                matched = [a for a in self._acls if flt.matches(a)]
                results.append(matched)
                remaining = [a for a in remaining if not flt.matches(a)]
            if len(remaining) != len(self._acls):
                self._commit(remaining)
            return results

    def matching(self, flt: AclFilter) -> list[AclBinding]:
        return [a for a in self._acls if flt.matches(a)]


class StandardAuthorizer:
    """Decisions over an AclStore (see module docs). Thread-safe for reads."""

    CACHE_LIMIT = 50_000

    def __init__(self, store: AclStore, super_users: Iterable[str], allow_if_no_acl: bool) -> None:
        self.store = store
        self.super_users = frozenset(s.strip() for s in super_users if s.strip())
        self.allow_if_no_acl = allow_if_no_acl
        self._cache: dict[tuple[str, str, int, int, str], bool] = {}
        self._cache_version = -1

    def authorize(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        text = str(principal)
        if text in self.super_users:
            return True
        if self._cache_version != self.store.version or len(self._cache) > self.CACHE_LIMIT:
            self._cache = {}
            self._cache_version = self.store.version
        key = (text, host, int(operation), int(resource_type), name)
        decision = self._cache.get(key)
        if decision is None:
            decision = self._decide(text, host, operation, resource_type, name)
            self._cache[key] = decision
        return decision

    def _decide(
        self, principal: str, host: str, operation: AclOperation, rtype: ResourceType, name: str
    ) -> bool:
        any_acl = allowed = False
        for acl in self.store:
            if acl.resource_type != rtype or not acl.covers(name):
                continue
            any_acl = True
            if acl.principal not in (principal, "User:*") or acl.host not in (host, WILDCARD):
                continue
            if not _operation_matches(acl, operation):
                continue
            if acl.permission == AclPermission.DENY:
                return False
            allowed = True
        if allowed:
            return True
        return not any_acl and self.allow_if_no_acl

    def authorized_operations(
        self, principal: KafkaPrincipal, host: str, resource_type: ResourceType, name: str
    ) -> int:
        """Kafka's 32-bit field: bit ``op`` set for each supported operation allowed."""
        bits = 0
        for op in SUPPORTED_OPERATIONS[resource_type]:
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << int(op)
        return bits

    def authorize_any(
        self, principal: KafkaPrincipal, host: str, operation: AclOperation, rtype: ResourceType
    ) -> bool:
        """Kafka's ``authorizeByResourceType``: is ``operation`` allowed on at least one
        resource of the type (an ALLOW pattern not wholly covered by a DENY)?"""
        if self.authorize(principal, host, operation, rtype, "hardcode"):
            return True
        text = str(principal)
        deny_literal: set[str] = set()
        deny_prefix: set[str] = set()
        allow: list[AclBinding] = []
        for acl in self.store:
            if acl.resource_type != rtype or acl.host not in (host, WILDCARD):
                continue
            if acl.principal not in (text, "User:*"):
                continue
            if acl.operation not in (operation, Op.ALL):
                continue
            if acl.permission == AclPermission.DENY:
                if acl.pattern_type == PatternType.LITERAL:
                    if acl.resource_name == WILDCARD:
                        return False
                    deny_literal.add(acl.resource_name)
                else:
                    deny_prefix.add(acl.resource_name)
            elif acl.permission == AclPermission.ALLOW:
                if acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD:
                    return True
                allow.append(acl)
        for acl in allow:
            name = acl.resource_name
            if acl.pattern_type == PatternType.LITERAL and name in deny_literal:
                continue
            if any(name[:i] in deny_prefix for i in range(1, len(name) + 1)):
                continue
            return True
        return False
