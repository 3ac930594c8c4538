"""`odradek cluster up|down|status`: a development cluster on loopback, and a view of any
cluster's metadata in etcd.

``up`` and ``down`` drive `odradek.devcluster.launcher` (etcd and N brokers as detached
processes under one data dir); ``status`` reads etcd directly through
`EtcdMetadataStore`, so it works while brokers are down, and for a cluster that
``up`` did not start (give ``--etcd``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek import extras
from odradek.cli import render
from odradek.cli.common import Failed, _reason, add_format_option, key_value, positive_float
from odradek.cli.errors import CliError

if TYPE_CHECKING:
    from odradek.cluster.etcd_tls import EtcdTls
    from odradek.devcluster.launcher import LocalCluster
    from odradek.replication.model import ClusterMetadata, RegistrationLease

DEFAULT_STATUS_TIMEOUT_S = 10.0
# `cluster status --etcd` over TLS: each option is a broker setting's (etcd over TLS).
ETCD_TLS_OPTIONS = (
    ("--etcd-cafile", "etcd.ssl.cafile", "the CA certificates etcd's certificate chains to"),
    ("--etcd-certfile", "etcd.ssl.certfile", "a client certificate to present to etcd"),
    ("--etcd-keyfile", "etcd.ssl.keyfile", "the private key of --etcd-certfile"),
)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from odradek.devcluster.launcher import (
        DEFAULT_BROKERS,
        DEFAULT_START_TIMEOUT_S,
        DEFAULT_STOP_TIMEOUT_S,
        MAX_BROKERS,
        MAX_ETCD_MEMBERS,
    )

    parser = commands.add_parser(
        "cluster",
        help="run a local development cluster; show a cluster's state",
        description="Start and stop a development cluster (etcd and brokers on 127.0.0.1, "
        "all under one data dir), and show any cluster's brokers, controller and "
        "partitions as etcd holds them.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    up = actions.add_parser(
        "up",
        help="start etcd and the brokers (only what is down)",
        description="Start etcd and N brokers on 127.0.0.1 as background processes and "
        "return once all serve; print one line per process. On a data dir that already "
        "holds a cluster, start only what is down, on the ports it had.",
    )
    up.add_argument(
        "--brokers",
        type=_broker_count(MAX_BROKERS),
        metavar="N",
        help=f"number of brokers, ids 1..N (1..{MAX_BROKERS}; default {DEFAULT_BROKERS}, or "
        "as many as the data dir has; more adds brokers, fewer is an error)",
    )
    _add_data_dir(up)
    up.add_argument(
        "--etcd-members",
        type=_broker_count(MAX_ETCD_MEMBERS),
        metavar="M",
        help=f"run etcd as a cluster of M members on 127.0.0.1 (1..{MAX_ETCD_MEMBERS}, "
        "default 1; 3 lets one member be killed or restarted with no effect on the brokers, "
        "each of which is given every member); fixed when the data dir is created",
    )
    up.add_argument(
        "--rack-count",
        type=_rack_count,
        metavar="K",
        help="put the brokers in racks r0..r(K-1), round-robin by id (default: no racks)",
    )
    up.add_argument(
        "--set",
        action="append",
        type=key_value,
        metavar="KEY=VALUE",
        help="a broker setting every broker gets, e.g. default.replication.factor=3 "
        "(repeatable; kept in the data dir; changing it needs 'cluster down' first)",
    )
    up.add_argument(
        "--format",
        "-o",
        choices=("table", "json"),
        default="table",
        help="table: 'etcd HOST:PORT pid PID' and 'broker ID HOST:PORT pid PID' lines "
        "(default); json: a list of {kind, id, host, port, pid}",
    )
    up.add_argument(
        "--timeout",
        type=positive_float,
        default=DEFAULT_START_TIMEOUT_S,
        metavar="SECONDS",
        help=f"give up when not all serve within this long (default {DEFAULT_START_TIMEOUT_S:g});"
        " what started keeps running",
    )
    up.set_defaults(run=run_up)

    down = actions.add_parser(
        "down",
        help="stop the brokers, then etcd",
        description="Stop a cluster started by 'cluster up': SIGTERM to the brokers, then "
        "to etcd; SIGKILL for any still running after --timeout. The data stays.",
    )
    _add_data_dir(down)
    down.add_argument(
        "--timeout",
        type=positive_float,
        default=DEFAULT_STOP_TIMEOUT_S,
        metavar="SECONDS",
        help=f"grace period before SIGKILL (default {DEFAULT_STOP_TIMEOUT_S:g})",
    )
    down.set_defaults(run=run_down)

    status = actions.add_parser(
        "status",
        help="brokers, controller and partitions as etcd holds them",
        description="Show a cluster's brokers (address, rack, process id, alive, and the "
        "etcd lease their registration hangs on), its controller and epoch, and each "
        "partition's leader, replicas and ISR, flagging under-replicated and offline "
        "partitions. Internal topics are left out unless asked for. Reads etcd directly. "
        "A broker that stops without leaving (kill -9, a hung host) stays registered "
        "until its lease ends (broker.session.timeout.ms): status says so.",
    )
    where = status.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--etcd",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="the etcd holding the metadata (its members, comma-separated: any that answers; "
        "https://HOST:PORT for TLS)",
    )
    where.add_argument(
        "--data-dir", metavar="DIR", help="a cluster started by 'cluster up' (its etcd)"
    )
    status.add_argument(
        "--cluster-name",
        metavar="NAME",
        help="the etcd.cluster.name setting of the brokers (default: the data dir's, else odradek)",
    )
    for option, setting, what in ETCD_TLS_OPTIONS:
        status.add_argument(
            option,
            metavar="FILE",
            help=f"with --etcd: {what}, PEM (the brokers' {setting}); any of these means TLS",
        )
    status.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC",
        help="only this topic's partitions (repeatable; internal topics too when named)",
    )
    status.add_argument(
        "--under-replicated",
        action="store_true",
        help="only partitions whose ISR is smaller than their replicas, or without a live "
        "leader (kafka-topics' --under-replicated-partitions and --unavailable-partitions)",
    )
    status.add_argument(
        "--internal",
        action="store_true",
        help="include internal topics (__consumer_offsets, __transaction_state, ...)",
    )
    status.add_argument(
        "--timeout",
        type=positive_float,
        default=DEFAULT_STATUS_TIMEOUT_S,
        metavar="SECONDS",
        help=f"give up on etcd after this long (default {DEFAULT_STATUS_TIMEOUT_S:g})",
    )
    add_format_option(status)
    status.set_defaults(run=run_status)


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        required=True,
        metavar="DIR",
        help="the cluster's directory: etcd and broker data, logs, cluster.json",
    )


def _broker_count(maximum: int) -> Any:
    """A count of 1..`maximum` (brokers, etcd members)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not 1 <= value <= maximum:
            raise argparse.ArgumentTypeError(f"expected 1..{maximum}, got {value}")
        return value

    return parse


def _rack_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {value}")
    return value


# ---------------------------------------------------------------------------
# up / down


def run_up(args: argparse.Namespace) -> int:
    from odradek.devcluster.etcd_server import EtcdStartError, find_etcd_binary
    from odradek.devcluster.launcher import ClusterError, LocalCluster, NotServingError

    settings = _checked_settings(args.set) if args.set is not None else None
    try:  # before anything is written: the brokers need aetcd, and etcd its binary
        extras.require("cluster", "cluster up")
        find_etcd_binary()
    except (extras.MissingExtra, EtcdStartError) as exc:
        raise CliError(str(exc)) from None
    try:
        cluster, processes = LocalCluster.up(
            args.data_dir,
            brokers=args.brokers,
            rack_count=args.rack_count,
            settings=settings,
            etcd_members=args.etcd_members,
            timeout_s=args.timeout,
        )
    except NotServingError as exc:
        print(f"--- last lines of {exc.log_path} ---", file=sys.stderr)
        print(exc.log_tail(), file=sys.stderr)
        print("---", file=sys.stderr)
        if exc.removed:
            raise Failed(
                f"{exc.reason}; the new cluster's processes were stopped and its files "
                f"removed from {args.data_dir}"
            ) from None
        raise Failed(
            f"{exc}; 'odradek cluster down --data-dir {args.data_dir}' stops the rest"
        ) from None
    except ClusterError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot use data dir {args.data_dir}: {exc.strerror or exc}") from None
    if args.format == "json":
        render.print_json([p.as_json() for p in processes])
    else:
        for process in processes:
            print(process.line())
    started = sum(p.started for p in processes)
    print(
        f"started {started} of {len(processes)} processes"
        + (f" ({len(processes) - started} were running)" if started < len(processes) else "")
        + f"; bootstrap servers: {cluster.bootstrap_servers()}",
        file=sys.stderr,
    )
    return 0


# Chosen by `cluster up` for each broker (its --listen, --etcd, --node-id, --rack, --data-dir).
LAUNCHER_SETTINGS = frozenset(
    {
        "listeners",
        "advertised.listeners",
        "node.id",
        "broker.id",
        "etcd.endpoints",
        "etcd.ssl.enable",  # and the files: up gives its own etcd's (LocalCluster)
        "etcd.ssl.cafile",
        "etcd.ssl.certfile",
        "etcd.ssl.keyfile",
        "broker.rack",
        "log.dirs",
        "log.dir",
    }
)


def _checked_settings(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """--set pairs, each a known broker setting with a valid value (cross-setting checks
    are the broker's, at start)."""
    from odradek.broker.config import BrokerConfig, ConfigError

    config = BrokerConfig()
    settings = {}
    for name, value in pairs:
        name = name.strip()
        if name in LAUNCHER_SETTINGS:
            raise CliError(f"--set {name}: cluster up sets it for each broker")
        try:
            config.set(name, value)
        except ConfigError as exc:
            raise CliError(f"--set {name}={value}: {exc}") from None
        settings[name] = value
    return settings


def run_down(args: argparse.Namespace) -> int:
    from odradek.devcluster.launcher import ClusterError, LocalCluster

    try:
        cluster = LocalCluster.open(args.data_dir)
        stopped = cluster.stop_all(timeout_s=args.timeout)
    except ClusterError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot use data dir {args.data_dir}: {exc.strerror or exc}") from None
    if not stopped:
        print(f"nothing running in {cluster.layout.root}")
    for info in stopped:
        print(info.line())
    return 0


# ---------------------------------------------------------------------------
# status


@dataclass(frozen=True, slots=True)
class BrokerRow:
    """One broker as `cluster status` shows it.

    `registered`: etcd holds its registration. `process`: what the data dir of
    ``cluster up`` says of its process ("running" or "gone"; None for a cluster given by
    --etcd, whose processes this command cannot see). A broker that died without
    leaving stays registered until its lease ends: then `alive` is False while
    `registered` is True, and `lease` says how long that lasts.
    """

    id: int
    host: str | None
    port: int | None
    rack: str | None
    pid: int | None
    registered: bool
    registered_pid: int | None
    process: str | None
    lease: RegistrationLease | None

    @property
    def alive(self) -> bool:
        if not self.registered or self.process == "gone":
            return False
        # a restarted broker's predecessor may still hold the registration
        return self.process is None or self.registered_pid in (None, self.pid)

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "host": self.host,
            "port": self.port,
            "rack": self.rack,
            "pid": self.pid,
            "alive": self.alive,
            "registered": self.registered,
            "registered_pid": self.registered_pid,
            "process": self.process,
            "lease": None
            if self.lease is None
            else {"ttl_s": self.lease.ttl_s, "remaining_s": self.lease.remaining_s},
        }


def run_status(args: argparse.Namespace) -> int:
    from odradek.broker.config import etcd_endpoint_scheme
    from odradek.broker.topics import INTERNAL_TOPICS
    from odradek.cli.serve import parse_address
    from odradek.devcluster.launcher import DEFAULT_CLUSTER_NAME, ClusterError, LocalCluster

    try:
        extras.require("cluster", "cluster status")
    except extras.MissingExtra as exc:
        raise CliError(str(exc)) from None
    cluster: LocalCluster | None = None
    tls: EtcdTls | None = None
    if args.data_dir is not None:
        given = [o for o, _, _ in ETCD_TLS_OPTIONS if getattr(args, _dest(o)) is not None]
        if given:
            raise CliError(f"{given[0]} goes with --etcd")
        try:
            cluster = LocalCluster.open(args.data_dir)
        except ClusterError as exc:
            raise CliError(str(exc)) from None
        endpoints = cluster.etcd_endpoints()
        try:
            tls = cluster.etcd_client_tls()
        except ClusterError as exc:
            raise CliError(str(exc)) from None
        name = args.cluster_name or cluster.cluster_name
    else:
        items = [e.strip() for e in args.etcd.split(",")]
        endpoints = [
            parse_address(e.removeprefix(etcd_endpoint_scheme(e)), "--etcd") for e in items
        ]
        tls = _etcd_tls(args, items)
        name = args.cluster_name or DEFAULT_CLUSTER_NAME
    _check_cluster_name(name)
    metadata, leases = _read_metadata(endpoints, name, args.timeout, tls)
    missing = [t for t in args.topic or () if t not in metadata.topics]
    if missing:
        which = ", ".join(repr(t) for t in missing)
        raise Failed(
            f"topic {which} does not exist" if len(missing) == 1 else f"topics {which} do not exist"
        )
    brokers = _broker_rows(metadata, leases, cluster)
    alive = {b.id for b in brokers if b.alive}
    partitions = [_partition_row(metadata, key, alive) for key in sorted(metadata.partitions)]
    if args.topic:
        partitions = [p for p in partitions if p["topic"] in args.topic]
    hidden = []
    if not args.internal and not args.topic:
        hidden = [p for p in partitions if p["topic"] in INTERNAL_TOPICS]
        partitions = [p for p in partitions if p["topic"] not in INTERNAL_TOPICS]
    if args.under_replicated:
        partitions = [p for p in partitions if p["under_replicated"] or p["offline"]]
    controller = metadata.controller
    summary = {
        "cluster": name,
        "etcd": ",".join(f"{host}:{port}" for host, port in endpoints),
        "controller": None
        if controller is None
        else {"broker_id": controller.broker_id, "epoch": controller.epoch},
        "controller_epoch": metadata.controller_epoch,
        "brokers": [b.as_json() for b in brokers],
        "partitions": partitions,
        "internal_hidden": {
            "partitions": len(hidden),
            "under_replicated": sum(p["under_replicated"] for p in hidden),
            "offline": sum(p["offline"] for p in hidden),
        },
    }
    if args.format == "json":
        render.print_json(summary)
    else:
        _print_status(summary, brokers, filtered=bool(args.topic or args.under_replicated))
    return 0


def _dest(option: str) -> str:
    return option.removeprefix("--").replace("-", "_")


def _etcd_tls(args: argparse.Namespace, endpoints: list[str]) -> EtcdTls | None:
    """TLS to etcd as the brokers' settings would have it (their checks, one line)."""
    from odradek.broker.config import ETCD_HTTPS, BrokerConfig, ConfigError, etcd_endpoint_scheme
    from odradek.cluster.etcd_tls import EtcdTls

    files = {s: getattr(args, _dest(o)) for o, s, _ in ETCD_TLS_OPTIONS}
    settings = {s: v for s, v in files.items() if v is not None}
    if settings and not any(etcd_endpoint_scheme(e) == ETCD_HTTPS for e in endpoints):
        settings["etcd.ssl.enable"] = "true"
    try:
        config = BrokerConfig({"etcd.endpoints": ",".join(endpoints), **settings})
        return EtcdTls.from_config(config)
    except ConfigError as exc:
        option = {s: o for o, s, _ in ETCD_TLS_OPTIONS}
        message = str(exc)
        for setting, flag in option.items():
            message = message.replace(setting, flag)
        raise CliError(message.replace("etcd.endpoints", "--etcd")) from None


def _check_cluster_name(name: str) -> None:
    from odradek.broker.config import BrokerConfig, ConfigError

    try:
        BrokerConfig().set("etcd.cluster.name", name)
    except ConfigError as exc:
        raise CliError(f"--cluster-name: {exc}") from None


def _read_metadata(
    endpoints: list[tuple[str, int]], name: str, timeout_s: float, tls: EtcdTls | None
) -> tuple[ClusterMetadata, dict[int, RegistrationLease]]:
    from odradek.cluster.etcd_tls import failure_hint
    from odradek.cluster.metadata import EtcdMetadataStore

    async def read() -> tuple[ClusterMetadata, dict[int, RegistrationLease]]:
        request_timeout = max(1, int(timeout_s))
        async with (
            asyncio.timeout(timeout_s),
            EtcdMetadataStore.for_endpoints(
                endpoints, cluster_name=name, request_timeout_s=request_timeout, tls=tls
            ) as store,
        ):
            metadata = (await store.cluster()).items
            return metadata, await store.registration_leases()

    address = ",".join(f"{host}:{port}" for host, port in endpoints)
    try:
        return asyncio.run(read())
    except TimeoutError:
        raise Failed(f"cannot reach etcd at {address} within {timeout_s:g}s") from None
    except Exception as exc:  # aetcd / grpc connection errors vary by cause
        reason = _reason(exc) if str(exc) else type(exc).__name__
        hint = failure_hint(str(exc), tls=tls is not None)
        raise Failed(
            f"cannot read the cluster from etcd at {address}: {hint + ': ' if hint else ''}{reason}"
        ) from None


def _broker_rows(
    metadata: ClusterMetadata,
    leases: dict[int, RegistrationLease],
    cluster: LocalCluster | None,
) -> list[BrokerRow]:
    """Registered brokers, plus those the data dir or a replica list names."""
    rows: dict[int, BrokerRow] = {}
    known = {} if cluster is None else cluster.state.brokers
    ids = set(metadata.brokers) | set(known)
    for assignment in metadata.topics.values():
        for replicas in assignment.replicas.values():
            ids.update(replicas)
    for broker_id in sorted(ids):
        info = metadata.brokers.get(broker_id)
        record = known.get(broker_id)
        process = None
        pid = info.pid if info is not None else None
        if cluster is not None and record is not None:
            running = cluster.is_running(broker_id)
            process = "running" if running else "gone"
            if running:
                pid = record.pid
        host = info.host if info is not None else record.host if record is not None else None
        port = info.port if info is not None else record.port if record is not None else None
        rack = info.rack if info is not None else record.rack if record is not None else None
        rows[broker_id] = BrokerRow(
            broker_id,
            host,
            port,
            rack,
            pid,
            registered=info is not None,
            registered_pid=None if info is None else info.pid,
            process=process,
            lease=leases.get(broker_id),
        )
    return list(rows.values())


def _partition_row(
    metadata: ClusterMetadata, key: tuple[str, int], alive: set[int]
) -> dict[str, Any]:
    topic, partition = key
    state = metadata.partitions[key].state
    assignment = metadata.topics.get(topic)
    replicas = list(assignment.replicas.get(partition, ())) if assignment else []
    return {
        "topic": topic,
        "partition": partition,
        "leader": state.leader,
        "leader_epoch": state.leader_epoch,
        "replicas": replicas,
        "isr": list(state.isr),
        "under_replicated": len(state.isr) < len(replicas),
        "offline": state.leader == -1 or state.leader not in alive,
    }


def _alive_cell(row: BrokerRow) -> Any:
    if row.alive:
        return render.text("yes", "green")
    if not row.registered:
        return render.text("no" if row.process != "running" else "no (not registered)", "red")
    if row.process == "gone":
        return render.text("no: process gone, still registered", "red")
    return render.text(f"starting: pid {row.registered_pid} still registered", "yellow")


def _unrefreshed(lease: RegistrationLease | None) -> bool:
    from odradek.cluster.lease_deadline import stopped_refreshing

    return lease is not None and stopped_refreshing(lease.ttl_s, lease.remaining_s)


def _lease_cell(lease: RegistrationLease | None) -> Any:
    if lease is None:
        return render.text(None)
    text = f"{lease.remaining_s} s left of {lease.ttl_s} s"
    if _unrefreshed(lease):
        return render.text(f"{text}, not refreshed for {lease.unrefreshed_s} s", "yellow")
    return render.text(text)


def _controller_cell(controller: dict[str, int] | None, rows: list[BrokerRow]) -> Any:
    if controller is None:
        return render.text("none (election due)", "yellow")
    text = f"broker {controller['broker_id']}, epoch {controller['epoch']}"
    if any(b.id == controller["broker_id"] and not b.alive for b in rows):
        # the role hangs on the same lease as the registration
        return render.text(f"{text} (not alive: the role ends with its lease)", "yellow")
    return text


def _print_status(summary: dict[str, Any], rows: list[BrokerRow], *, filtered: bool) -> None:
    out = render.output()
    controller = summary["controller"]
    out.print(
        render.key_values(
            [
                ("Cluster", summary["cluster"]),
                ("etcd", summary["etcd"]),
                ("Controller", _controller_cell(controller, rows)),
            ]
        )
    )
    brokers = render.table(
        "BROKER", "ADDRESS", "RACK", "PID", "ALIVE", "LEASE", numeric=("BROKER", "PID")
    )
    for b in rows:
        address = None if b.host is None else f"{b.host}:{b.port}"
        brokers.add_row(
            str(b.id),
            render.text(address),
            render.text(b.rack),
            render.text(b.pid),
            _alive_cell(b),
            _lease_cell(b.lease),
        )
    out.print(brokers if rows else render.text("no brokers", "dim"))
    for b in rows:
        whose = "" if b.registered_pid is None else f" (pid {b.registered_pid})"
        if b.registered and not b.alive and b.lease is not None:
            out.print(
                render.text(
                    f"broker {b.id}'s registration{whose} stays in etcd until its lease "
                    f"ends, within {b.lease.remaining_s + 1} s, or sooner once another "
                    "broker finds its port closed: a broker that stops without leaving is "
                    "seen as dead only then (broker.session.timeout.ms)",
                    "yellow",
                )
            )
        elif b.alive and b.process is None and b.lease is not None and _unrefreshed(b.lease):
            # --etcd: no process to look at, but a lease nobody refreshes says enough
            out.print(
                render.text(
                    f"broker {b.id}{whose} has not refreshed its lease for "
                    f"{b.lease.unrefreshed_s} s: it may have stopped without leaving; it "
                    f"counts as alive until the lease ends, within {b.lease.remaining_s + 1} s, "
                    "or another broker finds its port closed",
                    "yellow",
                )
            )
    partitions = summary["partitions"]
    hidden = summary["internal_hidden"]
    if partitions:
        t = render.table(
            "TOPIC", "PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "STATUS",
            numeric=("PARTITION", "LEADER", "EPOCH"),
        )  # fmt: skip
        for p in partitions:
            flags = [f for f in ("offline", "under_replicated") if p[f]]
            status = (
                render.text(", ".join(f.replace("_", "-") for f in flags), "red")
                if flags
                else render.text("ok", "green")
            )
            t.add_row(
                render.text(p["topic"]),
                str(p["partition"]),
                "none" if p["leader"] == -1 else str(p["leader"]),
                str(p["leader_epoch"]),
                ",".join(map(str, p["replicas"])) or "-",
                ",".join(map(str, p["isr"])) or "-",
                status,
            )
        out.print(t)
    elif not filtered and not hidden["partitions"]:
        out.print(render.text("no topics", "dim"))
        return
    under = sum(p["under_replicated"] for p in partitions)
    offline = sum(p["offline"] for p in partitions)
    line = f"{len(partitions)} partitions, {under} under-replicated, {offline} offline"
    if filtered:
        line = f"{len(partitions)} partitions shown, {under} under-replicated, {offline} offline"
    if hidden["partitions"]:
        flagged = [
            f"{hidden[k]} {k.replace('_', '-')}"
            for k in ("under_replicated", "offline")
            if hidden[k]
        ]
        line += (
            f"; {hidden['partitions']} partitions of internal topics hidden"
            + "".join(f", {flag}" for flag in flagged)
            + " (--internal shows them)"
        )
    out.print(line)
