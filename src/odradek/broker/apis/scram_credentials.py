"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554).

Describing needs DESCRIBE on the cluster, altering ALTER on the cluster
(CLUSTER_AUTHORIZATION_FAILED otherwise). An upsertion carries the salt and
the salted password the client computed; the broker keeps only the salt,
StoredKey, ServerKey and iteration count (``<data dir>/security/``).
Errors per user are Kafka's: RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE,
UNACCEPTABLE_CREDENTIAL (iterations outside 4096..16384, empty name or salt),
UNSUPPORTED_SASL_MECHANISM.
"""

from __future__ import annotations

import logging
from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.broker.security.credentials import check_iterations
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.scram import MECHANISMS_BY_TYPE, ScramCredential, ScramError

log = logging.getLogger("odradek.security")


@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
def describe_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    wanted = [u.name for u in request.users] if request.users else None
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        message = "Cluster authorization failed."
        return respond(
            ctx,
            {
                "throttle_time": NO_THROTTLE,
                "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": message,
                "results": [
                    {
                        "user": name,
                        "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                        "error_message": message,
                        "credential_infos": [],
                    }
                    for name in wanted or ()
                ],
            },
        )
    users = ctx.broker.security.credentials.users()
    results = []
    names = list(dict.fromkeys(wanted)) if wanted is not None else list(users)
    for name in names:
        result: dict[str, Any] = {
            "user": name,
            "error_code": 0,
            "error_message": None,
            "credential_infos": [],
        }
        if wanted is not None and wanted.count(name) > 1:
            result["error_code"] = ErrorCode.DUPLICATE_RESOURCE
            result["error_message"] = (
                f"Cannot describe SCRAM credentials for the same user twice in a single "
                f"request: {name}"
            )
        elif name not in users:
            result["error_code"] = ErrorCode.RESOURCE_NOT_FOUND
            result["error_message"] = (
                f"Attempt to describe a user credential that does not exist: {name}"
            )
        else:
            result["credential_infos"] = [
                {"mechanism": _type_code(mech), "iterations": iterations}
                for mech, iterations in users[name].items()
            ]
        results.append(result)
    return respond(
        ctx,
        {"throttle_time": NO_THROTTLE, "error_code": 0, "error_message": None, "results": results},
    )


def _type_code(mechanism_name: str) -> int:
    return next(m.type_code for m in MECHANISMS_BY_TYPE.values() if m.name == mechanism_name)


@handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def alter_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    names = sorted({d.name for d in request.deletions} | {u.name for u in request.upsertions})
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return respond(
            ctx,
            {
                "throttle_time": NO_THROTTLE,
                "results": [
                    {
                        "user": name,
                        "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                        "error_message": "Cluster authorization failed.",
                    }
                    for name in names
                ],
            },
        )
    store = ctx.broker.security.credentials
    errors: dict[str, tuple[int, str]] = {}
    # As Kafka's ZooKeeper-era check: one change per (user, mechanism) in a request, so a
    # user may get SCRAM-SHA-256 and SCRAM-SHA-512 at once.
    pairs = [(d.name, int(d.mechanism)) for d in request.deletions]
    pairs += [(u.name, int(u.mechanism)) for u in request.upsertions]
    for name, mech_type in pairs:
        if pairs.count((name, mech_type)) > 1:
            errors[name] = (
                ErrorCode.DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
    deletions, upserts = [], []
    for deletion in request.deletions:
        name = deletion.name
        mech = MECHANISMS_BY_TYPE.get(int(deletion.mechanism))
        if name in errors:
            continue
        if not name:
            errors[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mech is None:
            errors[name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif store.get(name, mech) is None:
            errors[name] = (
                ErrorCode.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
        else:
            deletions.append((name, mech))
    for upsertion in request.upsertions:
        name = upsertion.name
        mech = MECHANISMS_BY_TYPE.get(int(upsertion.mechanism))
        if name in errors:
            continue
        if not name:
            errors[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
            continue
        if mech is None:
            errors[name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
            continue
        try:
            check_iterations(int(upsertion.iterations))
        except ScramError as exc:
            errors[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, str(exc))
            continue
        salt, salted = bytes(upsertion.salt), bytes(upsertion.salted_password)
        if not salt or not salted:
            errors[name] = (
                ErrorCode.UNACCEPTABLE_CREDENTIAL,
                "salt and salted password must be given",
            )
            continue
        credential = ScramCredential.from_salted_password(
            mech, salt, salted, int(upsertion.iterations)
        )
        upserts.append((name, mech, credential))
    # A user with an error anywhere in the request is left unchanged.
    deletions = [d for d in deletions if d[0] not in errors]
    upserts = [u for u in upserts if u[0] not in errors]
    if deletions or upserts:
        # Through the control plane: a cluster's go to etcd, and every broker takes them.
        await ctx.broker.control.change_security("scram", lambda s: s.apply(upserts, deletions))
        for name, mech in deletions:
            log.info("%s removed the %s credential of %s", ctx.principal, mech.name, name)
        for name, mech, _ in upserts:
            log.info("%s set the %s credential of %s", ctx.principal, mech.name, name)
    results = [
        {
            "user": name,
            "error_code": errors[name][0] if name in errors else 0,
            "error_message": errors[name][1] if name in errors else None,
        }
        for name in names
    ]
    return respond(ctx, {"throttle_time": NO_THROTTLE, "results": results})
