"""`odradek cluster up|down|status`: a development cluster on loopback, and a view of any
cluster's metadata in etcd.

``up`` and ``down`` drive `odradek.cluster.launcher` (etcd and N brokers as detached
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

from odradek.cli import render
from odradek.cli.common import Failed, _reason, add_format_option, key_value, positive_float
from odradek.cli.errors import CliError

if TYPE_CHECKING:
    from odradek.cluster.launcher import LocalCluster
    from odradek.cluster.model import ClusterMetadata

DEFAULT_STATUS_TIMEOUT_S = 10.0


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from odradek.cluster.launcher import (
        DEFAULT_BROKERS,
        DEFAULT_START_TIMEOUT_S,
        DEFAULT_STOP_TIMEOUT_S,
        MAX_BROKERS,
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
        choices=("text", "json"),
        default="text",
        help="text: 'etcd HOST:PORT pid PID' and 'broker ID HOST:PORT pid PID' lines "
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
        description="Show a cluster's brokers (address, rack, alive), its controller and "
        "epoch, and each partition's leader, replicas and ISR, flagging under-replicated "
        "and offline partitions. Reads etcd directly.",
    )
    where = status.add_mutually_exclusive_group(required=True)
    where.add_argument("--etcd", metavar="HOST:PORT", help="the etcd holding the metadata")
    where.add_argument(
        "--data-dir", metavar="DIR", help="a cluster started by 'cluster up' (its etcd)"
    )
    status.add_argument(
        "--cluster-name",
        metavar="NAME",
        help="the etcd.cluster.name setting of the brokers (default: the data dir's, else odradek)",
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
    from odradek.cluster.launcher import ClusterError, LocalCluster, NotServingError

    settings = _checked_settings(args.set) if args.set is not None else None
    try:
        cluster = LocalCluster.prepare(
            args.data_dir, brokers=args.brokers, rack_count=args.rack_count, settings=settings
        )
        processes = cluster.start_all(timeout_s=args.timeout)
    except NotServingError as exc:
        print(f"--- last lines of {exc.log_path} ---", file=sys.stderr)
        print(exc.log_tail(), file=sys.stderr)
        print("---", file=sys.stderr)
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
    from odradek.cluster.launcher import ClusterError, LocalCluster

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
    id: int
    host: str | None
    port: int | None
    rack: str | None
    alive: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "host": self.host,
            "port": self.port,
            "rack": self.rack,
            "alive": self.alive,
        }


def run_status(args: argparse.Namespace) -> int:
    from odradek.cli.serve import parse_address
    from odradek.cluster.launcher import DEFAULT_CLUSTER_NAME, ClusterError, LocalCluster

    cluster: LocalCluster | None = None
    if args.data_dir is not None:
        try:
            cluster = LocalCluster.open(args.data_dir)
        except ClusterError as exc:
            raise CliError(str(exc)) from None
        endpoint = cluster.etcd_endpoint()
        name = args.cluster_name or cluster.cluster_name
    else:
        endpoint = parse_address(args.etcd, "--etcd")
        name = args.cluster_name or DEFAULT_CLUSTER_NAME
    _check_cluster_name(name)
    metadata = _read_metadata(endpoint, name, args.timeout)
    brokers = _broker_rows(metadata, cluster)
    alive = {b.id for b in brokers if b.alive}
    partitions = [_partition_row(metadata, key, alive) for key in sorted(metadata.partitions)]
    controller = metadata.controller
    summary = {
        "cluster": name,
        "etcd": f"{endpoint[0]}:{endpoint[1]}",
        "controller": None
        if controller is None
        else {"broker_id": controller.broker_id, "epoch": controller.epoch},
        "controller_epoch": metadata.controller_epoch,
        "brokers": [b.as_json() for b in brokers],
        "partitions": partitions,
    }
    if args.format == "json":
        render.print_json(summary)
    else:
        _print_status(summary)
    return 0


def _check_cluster_name(name: str) -> None:
    from odradek.broker.config import BrokerConfig, ConfigError

    try:
        BrokerConfig().set("etcd.cluster.name", name)
    except ConfigError as exc:
        raise CliError(f"--cluster-name: {exc}") from None


def _read_metadata(endpoint: tuple[str, int], name: str, timeout_s: float) -> ClusterMetadata:
    from odradek.cluster.metadata import EtcdMetadataStore

    async def read() -> ClusterMetadata:
        request_timeout = max(1, int(timeout_s))
        async with EtcdMetadataStore(
            *endpoint, cluster_name=name, request_timeout_s=request_timeout
        ) as store:
            return (await store.cluster()).items

    address = f"{endpoint[0]}:{endpoint[1]}"
    try:
        return asyncio.run(asyncio.wait_for(read(), timeout_s))
    except TimeoutError:
        raise Failed(f"cannot reach etcd at {address} within {timeout_s:g}s") from None
    except Exception as exc:  # aetcd / grpc connection errors vary by cause
        reason = _reason(exc) if str(exc) else type(exc).__name__
        raise Failed(f"cannot read the cluster from etcd at {address}: {reason}") from None


def _broker_rows(metadata: ClusterMetadata, cluster: LocalCluster | None) -> list[BrokerRow]:
    """Registered brokers (alive), plus those the data dir or a replica list names."""
    rows = {
        b.broker_id: BrokerRow(b.broker_id, b.host, b.port, b.rack, True)
        for b in metadata.brokers.values()
    }
    if cluster is not None:
        for record in cluster.state.brokers.values():
            if record.id not in rows:
                rows[record.id] = BrokerRow(record.id, record.host, record.port, record.rack, False)
    for assignment in metadata.topics.values():
        for replicas in assignment.replicas.values():
            for broker_id in replicas:
                rows.setdefault(broker_id, BrokerRow(broker_id, None, None, None, False))
    return [rows[i] for i in sorted(rows)]


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


def _print_status(summary: dict[str, Any]) -> None:
    out = render.output()
    controller = summary["controller"]
    out.print(
        render.key_values(
            [
                ("Cluster", summary["cluster"]),
                ("etcd", summary["etcd"]),
                (
                    "Controller",
                    render.text("none (election due)", "yellow")
                    if controller is None
                    else f"broker {controller['broker_id']}, epoch {controller['epoch']}",
                ),
            ]
        )
    )
    brokers = render.table("BROKER", "ADDRESS", "RACK", "ALIVE", numeric=("BROKER",))
    for b in summary["brokers"]:
        address = None if b["host"] is None else f"{b['host']}:{b['port']}"
        alive = render.text("yes", "green") if b["alive"] else render.text("no", "red")
        brokers.add_row(str(b["id"]), render.text(address), render.text(b["rack"]), alive)
    out.print(brokers if summary["brokers"] else render.text("no brokers", "dim"))
    partitions = summary["partitions"]
    if not partitions:
        out.print(render.text("no topics", "dim"))
        return
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
    under = sum(p["under_replicated"] for p in partitions)
    offline = sum(p["offline"] for p in partitions)
    out.print(f"{len(partitions)} partitions, {under} under-replicated, {offline} offline")
