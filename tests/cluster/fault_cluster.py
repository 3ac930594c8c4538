"""The cluster the fault suite runs: `LocalCluster`'s brokers on a three-member etcd
(`etcd_quorum`), each broker advertising its `link_proxy` proxy and reaching each etcd
member through a proxy too, so the nemesis can kill etcd members and cut links between
brokers, between the clients and a broker, and between a broker and etcd.

Only how brokers are started differs from `LocalCluster` (``--etcd`` names every etcd
member's proxy, ``--advertise`` the broker's proxy); starting, signals and state are its
own. The test's own etcd reads go to a running member directly.
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
from link_proxy import LinkProxies, Upstream

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
        etcd = ",".join(self.proxies.address(m) for m in etcd_upstreams(self.quorum))
        command[command.index("--etcd") + 1] = etcd
        return [*command, "--advertise", self.proxies.address(broker_id)]

    def bootstrap_servers(self) -> str:
        return self.proxies.bootstrap_servers()

    def real_address(self, broker_id: int) -> str:
        return super().broker_address(broker_id)

    def broker_pids(self) -> dict[int, int | None]:
        return {b: self.pid(b) for b in self.broker_ids}


def etcd_upstreams(quorum: EtcdQuorum) -> list[str]:
    """The proxies' names for the etcd members, in member order."""
    return [member.name for member in quorum.members]


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
    upstreams: dict[Upstream, tuple[str, int]] = {
        b: (cluster.state.brokers[b].host, cluster.state.brokers[b].port)
        for b in cluster.broker_ids
    }
    upstreams.update(zip(etcd_upstreams(quorum), quorum.endpoints, strict=True))
    cluster.proxies = LinkProxies(upstreams, cluster.broker_pids)
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
