"""The cluster the fault suite runs: `LocalCluster`'s brokers on a three-member etcd
(`etcd_quorum`), each broker advertising its `link_proxy` proxy, so the nemesis can kill
etcd members and cut links between brokers (and between the clients and a broker).

Only how brokers are started differs from `LocalCluster` (``--etcd`` names every etcd
member, ``--advertise`` the broker's proxy); starting, signals and state are its own.
Clients bootstrap through the proxies too, so Metadata and FindCoordinator answers
(the advertised addresses) lead them through the proxies as well.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cluster_harness import CLUSTER_SETTINGS, START_TIMEOUT_S, STOP_TIMEOUT_S
from etcd_quorum import EtcdQuorum
from link_proxy import LinkProxies

from odradek.devcluster.launcher import LocalCluster, Member


class FaultCluster(LocalCluster):
    quorum: EtcdQuorum
    proxies: LinkProxies

    def members(self) -> list[Member]:
        return list(self.broker_ids)  # etcd is the quorum's, not the launcher's

    def etcd_endpoint(self) -> tuple[str, int]:
        return self.quorum.live_endpoint()

    def broker_command(self, broker_id: int) -> list[str]:
        command = super().broker_command(broker_id)
        command[command.index("--etcd") + 1] = self.quorum.endpoint_list()
        return [*command, "--advertise", self.proxies.address(broker_id)]

    def bootstrap_servers(self) -> str:
        return self.proxies.bootstrap_servers()

    def real_address(self, broker_id: int) -> str:
        return super().broker_address(broker_id)

    def broker_pids(self) -> dict[int, int | None]:
        return {b: self.pid(b) for b in self.broker_ids}


@contextlib.contextmanager
def running_fault_cluster(
    data_dir: Path, brokers: int = 3, settings: dict[str, str] | None = None
) -> Iterator[FaultCluster]:
    """etcd's three members, a proxy per broker, `brokers` brokers registered; all stopped
    on exit, even after a failure."""
    quorum = EtcdQuorum(data_dir / "etcd-quorum")
    options: dict[str, Any] = {"wait_for_registration": True}
    cluster = FaultCluster.prepare(
        data_dir / "cluster",
        brokers=brokers,
        settings={**CLUSTER_SETTINGS, **(settings or {})},
        **options,
    )
    cluster.quorum = quorum
    upstreams = {b: cluster.state.brokers[b] for b in cluster.broker_ids}
    cluster.proxies = LinkProxies(
        {b: (r.host, r.port) for b, r in upstreams.items()}, cluster.broker_pids
    )
    try:
        quorum.start_all()
        cluster.proxies.start()
        cluster.start_all(timeout_s=START_TIMEOUT_S)
        yield cluster
    finally:
        try:
            cluster.stop_all(timeout_s=STOP_TIMEOUT_S)
        finally:
            cluster.proxies.stop()
            quorum.stop_all()
