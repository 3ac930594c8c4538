"""A three-member etcd cluster on loopback for the fault suite, whose members the nemesis
kills and restarts one at a time (the quorum survives one loss).

The members are `odradek.devcluster.etcd_server.etcd_members`, as `cluster up
--etcd-members 3` starts them; this adds only what the nemesis needs: `endpoints`,
`kill(i)`, `start(i)`. (The fault cluster runs its own quorum rather than the launcher's
because its brokers reach each member through a proxy.)
"""

from __future__ import annotations

from pathlib import Path

from odradek.devcluster.etcd_server import (
    EtcdServer,
    EtcdStartError,
    etcd_members,
    start_members,
)

MEMBERS = 3
START_TIMEOUT_S = 60.0


class EtcdQuorum:
    def __init__(self, data_dir: Path, members: int = MEMBERS) -> None:
        self.members: list[EtcdServer] = etcd_members(
            data_dir, members, start_timeout_s=START_TIMEOUT_S
        )

    @property
    def endpoints(self) -> list[tuple[str, int]]:
        return [m.endpoint for m in self.members]

    def live_endpoint(self) -> tuple[str, int]:
        """A running member's endpoint (the test's own etcd reads)."""
        for member in self.members:
            if member.running:
                return member.endpoint
        raise EtcdStartError("no etcd member runs")

    def start_all(self) -> None:
        start_members(self.members, START_TIMEOUT_S)

    def start(self, index: int) -> None:
        """Restart a killed member (its data dir holds its membership: it rejoins)."""
        member = self.members[index]
        if not member.running:
            member.start()

    def kill(self, index: int) -> None:
        self.members[index].kill()

    def stop_all(self) -> None:
        for member in self.members:
            member.kill()
