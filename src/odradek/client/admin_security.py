"""The admin client's security calls: ACLs (DescribeAcls, CreateAcls, DeleteAcls)
and SCRAM users (DescribeUserScramCredentials, AlterUserScramCredentials).

As in the Java admin client, a SCRAM upsertion carries a random salt and the
salted password computed here, so the password never crosses the wire; the
broker keeps only keys derived from it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any, NamedTuple

from odradek.client.errors import KafkaError, make_error
from odradek.protocol.acl import AclOperation, AclPermission, PatternType, ResourceType
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.scram import (
    DEFAULT_ITERATIONS,
    MECHANISMS,
    MECHANISMS_BY_TYPE,
    ScramError,
    mechanism,
)


class AclBinding(NamedTuple):
    """One ACL: who (principal, host) may or may not (permission) do what (operation)
    on which resources (type, name, LITERAL or PREFIXED)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission


class AclBindingFilter(NamedTuple):
    """Matches ACLs for DescribeAcls / DeleteAcls; None and ANY match everything
    (pattern MATCH: every ACL that applies to the literal name)."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermission = AclPermission.ANY


class ScramCredentialInfo(NamedTuple):
    mechanism: str  # "SCRAM-SHA-512"
    iterations: int


class UserScramCredentialUpsertion(NamedTuple):
    user: str
    mechanism: str
    password: str
    iterations: int = DEFAULT_ITERATIONS

    def __repr__(self) -> str:  # never show the password
        return f"UserScramCredentialUpsertion({self.user!r}, {self.mechanism}, {self.iterations})"


class UserScramCredentialDeletion(NamedTuple):
    user: str
    mechanism: str


def _filter_body(flt: AclBindingFilter) -> dict[str, Any]:
    return {
        "resource_type_filter": int(flt.resource_type),
        "resource_name_filter": flt.resource_name,
        "pattern_type_filter": int(flt.pattern_type),
        "principal_filter": flt.principal,
        "host_filter": flt.host,
        "operation": int(flt.operation),
        "permission_type": int(flt.permission),
    }


def _binding(resource_type: int, name: str, pattern: int, acl: Any) -> AclBinding:
    return AclBinding(
        ResourceType(resource_type),
        name,
        PatternType(pattern),
        acl.principal,
        acl.host,
        AclOperation(int(acl.operation)),
        AclPermission(int(acl.permission_type)),
    )


def _error_of(result: Any) -> KafkaError | None:
    code = int(result.error_code)
    return make_error(code, result.error_message) if code else None


def _future(error: BaseException | None, value: Any = None) -> Future[Any]:
    future: Future[Any] = Future()
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(error)
    return future


class SecurityAdminMixin:
    """Mixed into AdminClient: uses its ``_call``, ``_any_node`` and ``_timeout_s``."""

    _call: Callable[..., Any]
    _any_node: Callable[[], int]
    _timeout_s: Callable[[int | None], float]

    # ------------------------------------------------------------------ ACLs

    def describe_acls(
        self, acl_filter: AclBindingFilter | None = None, *, timeout_ms: int | None = None
    ) -> list[AclBinding]:
        """Every ACL matching the filter (all ACLs by default)."""
        flt = acl_filter or AclBindingFilter()
        response = self._call(
            self._any_node,
            ApiKey.DESCRIBE_ACLS,
            _filter_body(flt),
            self._timeout_s(timeout_ms),
            check=lambda r: int(r.error_code),
        )
        return [
            _binding(int(res.resource_type), res.resource_name, int(res.pattern_type), acl)
            for res in response.resources
            for acl in res.acls
        ]

    def create_acls(
        self, acls: Sequence[AclBinding], *, timeout_ms: int | None = None
    ) -> dict[AclBinding, Future[None]]:
        """One future per ACL (an invalid one fails alone)."""
        body = {
            "creations": [
                {
                    "resource_type": int(a.resource_type),
                    "resource_name": a.resource_name,
                    "resource_pattern_type": int(a.pattern_type),
                    "principal": a.principal,
                    "host": a.host,
                    "operation": int(a.operation),
                    "permission_type": int(a.permission),
                }
                for a in acls
            ]
        }
        response = self._call(self._any_node, ApiKey.CREATE_ACLS, body, self._timeout_s(timeout_ms))
        return {acl: _future(_error_of(r)) for acl, r in zip(acls, response.results, strict=True)}

    def delete_acls(
        self, filters: Sequence[AclBindingFilter], *, timeout_ms: int | None = None
    ) -> dict[AclBindingFilter, Future[list[AclBinding]]]:
        """One future per filter, holding the ACLs it deleted."""
        body = {"filters": [_filter_body(f) for f in filters]}
        response = self._call(self._any_node, ApiKey.DELETE_ACLS, body, self._timeout_s(timeout_ms))
        out: dict[AclBindingFilter, Future[list[AclBinding]]] = {}
        for flt, result in zip(filters, response.filter_results, strict=True):
            if result.error_code:
                out[flt] = _future(_error_of(result))
                continue
            deleted = [
                _binding(int(m.resource_type), m.resource_name, int(m.pattern_type), m)
                for m in result.matching_acls
            ]
            out[flt] = _future(None, deleted)
        return out

    # ------------------------------------------------------------------ SCRAM users

    def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> dict[str, list[ScramCredentialInfo]]:
        """Mechanisms and iterations of each user (all users by default). A named user
        without credentials raises ResourceNotFoundError."""
        wanted = list(users) if users is not None else None
        body = {"users": [{"name": u} for u in wanted] if wanted is not None else None}
        response = self._call(
            self._any_node,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
            body,
            self._timeout_s(timeout_ms),
            check=lambda r: int(r.error_code),
        )
        out: dict[str, list[ScramCredentialInfo]] = {}
        for result in response.results:
            if result.error_code:
                raise make_error(int(result.error_code), result.error_message)
            out[result.user] = [
                ScramCredentialInfo(MECHANISMS_BY_TYPE[int(c.mechanism)].name, int(c.iterations))
                for c in result.credential_infos
                if int(c.mechanism) in MECHANISMS_BY_TYPE
            ]
        return out

    def alter_user_scram_credentials(
        self,
        alterations: Sequence[UserScramCredentialUpsertion | UserScramCredentialDeletion],
        *,
        timeout_ms: int | None = None,
    ) -> dict[str, Future[None]]:
        """Create, change or delete SCRAM credentials; one future per user."""
        upsertions, deletions = [], []
        for change in alterations:
            try:
                mech = mechanism(change.mechanism)
            except ScramError as exc:
                raise KafkaError(str(exc)) from None
            if isinstance(change, UserScramCredentialUpsertion):
                salt = secrets.token_bytes(32)
                upsertions.append(
                    {
                        "name": change.user,
                        "mechanism": mech.type_code,
                        "iterations": change.iterations,
                        "salt": salt,
                        "salted_password": mech.salted_password(
                            change.password, salt, change.iterations
                        ),
                    }
                )
            else:
                deletions.append({"name": change.user, "mechanism": mech.type_code})
        body = {"upsertions": upsertions, "deletions": deletions}
        response = self._call(
            self._any_node,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
            body,
            self._timeout_s(timeout_ms),
        )
        return {
            r.user: _future(
                make_error(int(r.error_code), r.error_message) if r.error_code else None
            )
            for r in response.results
        }


__all__ = [
    "MECHANISMS",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermission",
    "PatternType",
    "ResourceType",
    "ScramCredentialInfo",
    "SecurityAdminMixin",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
]
