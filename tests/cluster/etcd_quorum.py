"""A three-member etcd cluster on loopback for the fault suite, whose members the nemesis
kills and restarts one at a time (the quorum survives one loss).

`odradek.devcluster.etcd_server.EtcdServer` runs one single-member etcd; a member of a
cluster differs only in etcd's ``--initial-cluster`` (every member's name and peer URL),
and a member of a new cluster is healthy only once a quorum runs, so all are spawned
before any is waited for. TODO(issue 21, etcd item): when `cluster up --etcd-members N`
lands in the launcher (several members started by `LocalCluster`), use that instead and
drop this module; the nemesis only needs `endpoints`, `kill(i)`, `start(i)`.
"""

from __future__ import annotations

import time
from pathlib import Path

from odradek.devcluster.etcd_server import EtcdServer, EtcdStartError, pick_free_port

MEMBERS = 3
START_TIMEOUT_S = 60.0
HEALTH_POLL_S = 0.1


class QuorumMember(EtcdServer):
    """One member of a cluster named by `initial_cluster` (``name=peer URL,...``)."""

    label = "etcd member"
    initial_cluster = ""

    def command(self) -> list[str]:
        command = super().command()
        command[command.index("--initial-cluster") + 1] = self.initial_cluster
        return command

    def spawn(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._spawn(self.command())


class EtcdQuorum:
    def __init__(self, data_dir: Path, members: int = MEMBERS) -> None:
        self.members: list[QuorumMember] = []
        for i in range(members):
            member = QuorumMember(
                data_dir / f"member-{i}",
                client_port=pick_free_port("127.0.0.1"),
                peer_port=pick_free_port("127.0.0.1"),
                name=f"etcd-{i}",
                start_timeout_s=START_TIMEOUT_S,
            )
            self.members.append(member)
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        for member in self.members:
            member.initial_cluster = initial

    @property
    def endpoints(self) -> list[tuple[str, int]]:
        return [m.endpoint for m in self.members]

    def endpoint_list(self) -> str:
        """What a broker's ``--etcd`` takes."""
        return ",".join(f"{host}:{port}" for host, port in self.endpoints)

    def live_endpoint(self) -> tuple[str, int]:
        """A running member's endpoint (the test's own etcd reads)."""
        for member in self.members:
            if member.running:
                return member.endpoint
        raise EtcdStartError("no etcd member runs")

    def start_all(self) -> None:
        for member in self.members:
            if not member.running:
                member.spawn()
        self._wait_healthy(self.members)

    def start(self, index: int) -> None:
        """Restart a killed member (its data dir holds its membership: it rejoins)."""
        member = self.members[index]
        if not member.running:
            member.spawn()
        self._wait_healthy([member])

    def kill(self, index: int) -> None:
        self.members[index].kill()

    def stop_all(self) -> None:
        for member in self.members:
            member.kill()

    @staticmethod
    def _wait_healthy(members: list[QuorumMember]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        for member in members:
            while not member.healthy():
                if not member.running:
                    raise EtcdStartError(f"{member.name} exited:\n{member.log_tail()}")
                if time.monotonic() >= deadline:
                    raise EtcdStartError(f"{member.name} not healthy:\n{member.log_tail()}")
                time.sleep(HEALTH_POLL_S)
