"""DescribeAcls, CreateAcls, DeleteAcls (Kafka's AclApis).

Describing needs DESCRIBE on the cluster, changing needs ALTER on the cluster;
without an authorizer (``authorizer.class.name`` unset) every call answers
SECURITY_DISABLED. ACLs persist in ``<data dir>/security/acls.json``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclError,
    AclFilter,
    AclOperation,
    ResourceType,
)
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.security")

NO_AUTHORIZER = "No Authorizer is configured on the broker"


def _refusal(ctx: RequestContext, operation: AclOperation) -> tuple[int, str] | None:
    """The error every item gets, if any: not authorized, or no authorizer at all."""
    if not ctx.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    if ctx.broker.security.authorizer is None:
        return ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER
    return None


def _filter(entity: Any) -> AclFilter:
    flt = AclFilter(
        int(entity.resource_type_filter),
        entity.resource_name_filter,
        int(entity.pattern_type_filter),
        entity.principal_filter,
        entity.host_filter,
        int(entity.operation),
        int(entity.permission_type),
    )
    flt.validate()
    return flt


@handles(ApiKey.DESCRIBE_ACLS, 1, 3)
def describe_acls(ctx: RequestContext, request: Any) -> Any:
    values: dict[str, Any] = {
        "throttle_time": NO_THROTTLE,
        "error_code": 0,
        "error_message": None,
        "resources": [],
    }
    refusal = _refusal(ctx, AclOperation.DESCRIBE)
    if refusal is not None:
        values["error_code"], values["error_message"] = refusal
        return respond(ctx, values)
    try:
        matched = ctx.broker.security.acls.matching(_filter(request))
    except AclError as exc:
        values["error_code"], values["error_message"] = exc.error_code, str(exc)
        return respond(ctx, values)
    by_resource: dict[tuple[int, str, int], list[AclBinding]] = defaultdict(list)
    for acl in matched:
        by_resource[(acl.resource_type, acl.resource_name, acl.pattern_type)].append(acl)
    values["resources"] = [
        {
            "resource_type": rtype,
            "resource_name": name,
            "pattern_type": pattern,
            "acls": [
                {
                    "principal": a.principal,
                    "host": a.host,
                    "operation": a.operation,
                    "permission_type": a.permission,
                }
                for a in acls
            ],
        }
        for (rtype, name, pattern), acls in by_resource.items()
    ]
    return respond(ctx, values)


@handles(ApiKey.CREATE_ACLS, 1, 3)
async def create_acls(ctx: RequestContext, request: Any) -> Any:
    refusal = _refusal(ctx, AclOperation.ALTER)
    results: list[dict[str, Any]] = []
    valid: list[AclBinding] = []
    for creation in request.creations:
        if refusal is not None:
            results.append({"error_code": refusal[0], "error_message": refusal[1]})
            continue
        acl = AclBinding(
            int(creation.resource_type),
            creation.resource_name,
            int(creation.resource_pattern_type),
            creation.principal,
            creation.host,
            int(creation.operation),
            int(creation.permission_type),
        )
        try:
            acl.validate()
        except AclError as exc:
            results.append({"error_code": exc.error_code, "error_message": str(exc)})
            continue
        valid.append(acl)
        results.append({"error_code": 0, "error_message": None})
    if valid:
        # Through the control plane: a cluster's go to etcd, and every broker takes them.
        await ctx.broker.control.change_security("acls", lambda store: store.add(valid))
        for acl in valid:
            log.info("ACL added by %s: %s", ctx.principal, acl)
    return respond(ctx, {"throttle_time": NO_THROTTLE, "results": results})


@handles(ApiKey.DELETE_ACLS, 1, 3)
async def delete_acls(ctx: RequestContext, request: Any) -> Any:
    refusal = _refusal(ctx, AclOperation.ALTER)
    filters: list[AclFilter] = []
    errors: dict[int, tuple[int, str]] = {}
    for index, entity in enumerate(request.filters):
        if refusal is not None:
            errors[index] = refusal
            continue
        try:
            filters.append(_filter(entity))
        except AclError as exc:
            errors[index] = (exc.error_code, str(exc))
    removed: list[list[AclBinding]] = []
    if filters:
        removed = await ctx.broker.control.change_security(
            "acls", lambda store: store.remove(filters)
        )
    deleted = iter(removed)
    results = []
    for index in range(len(request.filters)):
        if index in errors:
            code, message = errors[index]
            results.append({"error_code": code, "error_message": message, "matching_acls": []})
            continue
        matched = next(deleted)
        for acl in matched:
            log.info("ACL removed by %s: %s", ctx.principal, acl)
        results.append(
            {
                "error_code": 0,
                "error_message": None,
                "matching_acls": [
                    {
                        "error_code": 0,
                        "error_message": None,
                        "resource_type": a.resource_type,
                        "resource_name": a.resource_name,
                        "pattern_type": a.pattern_type,
                        "principal": a.principal,
                        "host": a.host,
                        "operation": a.operation,
                        "permission_type": a.permission,
                    }
                    for a in matched
                ],
            }
        )
    return respond(ctx, {"throttle_time": NO_THROTTLE, "filter_results": results})
