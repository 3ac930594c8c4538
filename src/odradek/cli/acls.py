"""`odradek acls list|add|remove`: ACLs, with the options of Kafka's kafka-acls tool.

odradek acls add --allow-principal User:alice --operation Read --topic orders
odradek acls add --allow-principal User:app --producer --topic orders
odradek acls add --allow-principal User:app --consumer --topic orders --group billing
odradek acls list --topic orders
odradek acls remove --allow-principal User:alice --operation Read --topic orders
"""

from __future__ import annotations

import argparse
from typing import Any

from odradek.cli.common import (
    add_connection_options,
    add_format_option,
    admin_client,
    describe_error,
    failures_as_messages,
)
from odradek.cli.errors import CliError

_RESOURCES = ("topic", "group", "cluster", "transactional_id")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "acls",
        help="list, add and remove ACLs",
        description="Manage ACLs (the broker needs authorizer.class.name set). Options "
        "follow Kafka's kafka-acls tool.",
    )
    sub = parser.add_subparsers(dest="acls_command", metavar="ACTION")
    sub.required = True

    listing = sub.add_parser(
        "list",
        help="list ACLs",
        description="List ACLs, all of them or those on the given resources (and of --principal).",
    )
    _resource_options(listing, default_pattern="literal")
    listing.add_argument("--principal", action="append", default=[], metavar="PRINCIPAL")
    add_format_option(listing)
    add_connection_options(listing)
    listing.set_defaults(run=run_list)

    for action, helptext in (("add", "add ACLs"), ("remove", "remove ACLs")):
        cmd = sub.add_parser(
            action,
            help=helptext,
            description=f"{helptext.capitalize()} for principals on resources.",
            epilog="Example: odradek acls add --allow-principal User:alice "
            "--operation Read --operation Describe --topic orders",
        )
        _resource_options(cmd, default_pattern="literal")
        _entry_options(cmd)
        add_connection_options(cmd)
        cmd.set_defaults(run=run_add if action == "add" else run_remove)


def _resource_options(parser: argparse.ArgumentParser, *, default_pattern: str) -> None:
    group = parser.add_argument_group("resources")
    group.add_argument("--topic", action="append", default=[], metavar="NAME")
    group.add_argument("--group", action="append", default=[], metavar="NAME")
    group.add_argument("--cluster", action="store_true", help="the cluster resource")
    group.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    group.add_argument(
        "--resource-pattern-type",
        choices=("literal", "prefixed", "any", "match"),
        default=default_pattern,
        help="literal (default): the exact name ('*' is every name); prefixed: names "
        "starting with it; list/remove also take any and match",
    )


def _entry_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("who and what")
    group.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL")
    group.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
    group.add_argument(
        "--allow-host", action="append", default=[], metavar="HOST", help="default '*'"
    )
    group.add_argument(
        "--deny-host", action="append", default=[], metavar="HOST", help="default '*'"
    )
    group.add_argument(
        "--operation",
        action="append",
        default=[],
        metavar="OP",
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
        "AlterConfigs, IdempotentWrite, All (repeatable)",
    )
    group.add_argument(
        "--producer",
        action="store_true",
        help="shortcut: Write, Describe and Create on the --topic(s)",
    )
    group.add_argument(
        "--consumer",
        action="store_true",
        help="shortcut: Read and Describe on the --topic(s), Read on the --group(s)",
    )


def _operation(text: str) -> Any:
    from odradek.client import AclOperation

    wanted = text.replace("-", "").replace("_", "").lower()
    for op in AclOperation:
        if op.name.replace("_", "").lower() == wanted and op not in (
            AclOperation.UNKNOWN,
            AclOperation.ANY,
        ):
            return op
    raise CliError(f"--operation {text!r} is not an ACL operation")


def _resources(args: argparse.Namespace) -> list[tuple[Any, str]]:
    from odradek.client import ResourceType
    from odradek.protocol.acl import CLUSTER_NAME

    out = [(ResourceType.TOPIC, n) for n in args.topic]
    out += [(ResourceType.GROUP, n) for n in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, n) for n in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _pattern(args: argparse.Namespace) -> Any:
    from odradek.client import PatternType

    return PatternType[args.resource_pattern_type.upper()]


def _bindings(args: argparse.Namespace, *, for_add: bool) -> list[Any]:
    """Every (resource, principal, host, operation, permission) the options name."""
    from odradek.client import AclBinding, AclOperation, AclPermission, ResourceType

    resources = _resources(args)
    if not resources:
        raise CliError("name a resource: --topic, --group, --cluster or --transactional-id")
    pattern = _pattern(args)
    if for_add and pattern.name not in ("LITERAL", "PREFIXED"):
        raise CliError("acls add takes --resource-pattern-type literal or prefixed")
    entries = [(p, args.allow_host or ["*"], AclPermission.ALLOW) for p in args.allow_principal]
    entries += [(p, args.deny_host or ["*"], AclPermission.DENY) for p in args.deny_principal]
    if not entries:
        raise CliError("name a principal: --allow-principal or --deny-principal (User:NAME)")
    per_type: dict[Any, list[Any]] = {}
    operations = [_operation(o) for o in args.operation]
    if args.producer:
        per_type[ResourceType.TOPIC] = [
            AclOperation.WRITE,
            AclOperation.DESCRIBE,
            AclOperation.CREATE,
        ]
    if args.consumer:
        per_type.setdefault(ResourceType.TOPIC, []).extend(
            [AclOperation.READ, AclOperation.DESCRIBE]
        )
        per_type[ResourceType.GROUP] = [AclOperation.READ]
        if not args.group:
            raise CliError("--consumer needs --group")
    if not operations and not per_type:
        raise CliError("name --operation(s), or use --producer / --consumer")
    out = []
    for rtype, name in resources:
        ops = list(dict.fromkeys(operations + per_type.get(rtype, [])))
        for principal, hosts, permission in entries:
            if ":" not in principal:
                raise CliError(f"principal {principal!r} must look like User:NAME")
            for host in hosts:
                for op in ops:
                    out.append(AclBinding(rtype, name, pattern, principal, host, op, permission))
    return out


def _describe(acl: Any) -> str:
    return (
        f"{acl.permission.name} {acl.principal} {acl.operation.name} from {acl.host} "
        f"on {acl.resource_type.name} {acl.pattern_type.name} {acl.resource_name!r}"
    )


def run_add(args: argparse.Namespace) -> int:
    bindings = _bindings(args, for_add=True)
    failures = []
    with admin_client(args) as admin, failures_as_messages("cannot add ACLs"):
        results = admin.create_acls(bindings)
    for acl, future in results.items():
        try:
            future.result()
            print(f"added: {_describe(acl)}")
        except Exception as exc:
            failures.append(f"{_describe(acl)}: {describe_error(exc)}")
    if failures:
        from odradek.cli.common import Failed

        raise Failed("; ".join(failures))
    return 0


def _removal_filters(args: argparse.Namespace) -> list[Any]:
    """Filters for `remove`: what the options name, and ANY for what they leave out
    (no --operation: every operation; no principal: every principal)."""
    from odradek.client import AclBindingFilter, AclOperation, AclPermission

    resources = _resources(args)
    if not resources:
        raise CliError("name a resource: --topic, --group, --cluster or --transactional-id")
    entries: list[tuple[str | None, list[str | None], Any]] = [
        (p, list(args.allow_host) or [None], AclPermission.ALLOW) for p in args.allow_principal
    ]
    entries += [
        (p, list(args.deny_host) or [None], AclPermission.DENY) for p in args.deny_principal
    ]
    if not entries:
        entries = [(None, [None], AclPermission.ANY)]
    if args.producer or args.consumer:
        return [
            AclBindingFilter(
                b.resource_type,
                b.resource_name,
                b.pattern_type,
                b.principal,
                b.host,
                b.operation,
                b.permission,
            )
            for b in _bindings(args, for_add=False)
        ]
    operations = [_operation(o) for o in args.operation] or [AclOperation.ANY]
    pattern = _pattern(args)
    return [
        AclBindingFilter(rtype, name, pattern, principal, host, op, permission)
        for rtype, name in resources
        for principal, hosts, permission in entries
        for host in hosts
        for op in operations
    ]


def run_remove(args: argparse.Namespace) -> int:
    filters = _removal_filters(args)
    with admin_client(args) as admin, failures_as_messages("cannot remove ACLs"):
        results = admin.delete_acls(filters)
        removed = list(dict.fromkeys(acl for f in results.values() for acl in f.result()))
    for acl in removed:
        print(f"removed: {_describe(acl)}")
    if not removed:
        print("no matching ACL")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from odradek.cli import render
    from odradek.client import AclBindingFilter, PatternType

    resources = _resources(args)
    pattern = _pattern(args) if resources else PatternType.ANY
    filters = [AclBindingFilter(t, n, pattern) for t, n in resources] or [AclBindingFilter()]
    acls = []
    with admin_client(args) as admin, failures_as_messages("cannot list ACLs"):
        for flt in filters:
            acls.extend(admin.describe_acls(flt))
    if args.principal:
        acls = [a for a in acls if a.principal in args.principal]
    acls = sorted(
        set(acls),
        key=lambda a: (a.resource_type, a.resource_name, a.pattern_type, a.principal, a.operation),
    )
    if args.format == "json":
        render.print_json(
            [
                {
                    "resource_type": a.resource_type.name,
                    "resource_name": a.resource_name,
                    "pattern_type": a.pattern_type.name,
                    "principal": a.principal,
                    "host": a.host,
                    "operation": a.operation.name,
                    "permission": a.permission.name,
                }
                for a in acls
            ]
        )
        return 0
    out = render.output()
    if not acls:
        out.print("No ACLs.")
        return 0
    table = render.table(
        "RESOURCE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"
    )
    for a in acls:
        table.add_row(
            a.resource_type.name,
            render.text(a.resource_name),
            a.pattern_type.name,
            render.text(a.principal),
            render.text(a.host),
            a.operation.name,
            a.permission.name,
        )
    out.print(table)
    return 0
