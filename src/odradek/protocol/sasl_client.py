"""The client side of SASL PLAIN and SCRAM as Kafka runs them: the tokens a client sends,
one per server challenge. Shared by Odradek's client (``client/security.py``) and a
broker authenticating to another broker (``cluster/peer_connection.py``). No I/O."""

from __future__ import annotations

from collections.abc import Callable

from odradek.protocol.scram import MECHANISMS, ScramClient

Steps = Callable[[bytes | None], bytes | None]


def sasl_steps(mechanism: str, username: str, password: str) -> Steps:
    """The client's tokens, one per call with the server's last challenge (None first);
    None when the exchange is over. Raises ScramError for a bad server message."""
    if mechanism == "PLAIN":
        sent = False

        def plain(_challenge: bytes | None) -> bytes | None:
            nonlocal sent
            if sent:
                return None
            sent = True
            return b"\x00" + username.encode() + b"\x00" + password.encode()

        return plain
    scram = ScramClient(MECHANISMS[mechanism], username, password)
    step = 0

    def scram_step(challenge: bytes | None) -> bytes | None:
        nonlocal step
        step += 1
        if step == 1:
            return scram.first()
        if step == 2:
            assert challenge is not None
            return scram.final(challenge)
        assert challenge is not None
        scram.verify(challenge)
        return None

    return scram_step
