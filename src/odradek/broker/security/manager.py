"""BrokerSecurity: what the whole broker shares for security, and a Session per connection."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from odradek.broker.config import BrokerConfig, ConfigError, format_value
from odradek.broker.security.acl import AclStore, StandardAuthorizer
from odradek.broker.security.credentials import InitialScramUser, ScramCredentialStore
from odradek.broker.security.inter_broker import inter_broker
from odradek.broker.security.listeners import (
    Listener,
    listener_value,
    server_ssl_context,
)
from odradek.broker.security.principal import (
    ANONYMOUS,
    KafkaPrincipal,
    PrincipalError,
    SslPrincipalMapper,
    subject_dn,
)
from odradek.broker.security.sasl import SUPPORTED_MECHANISMS, SaslServer, new_sasl_server
from odradek.broker.security.session import Session
from odradek.broker.security.store import SECURITY_DIR
from odradek.protocol.jaas import JaasError, parse_jaas

log = logging.getLogger("odradek.security")

# Kafka's class name (KRaft), and the ZooKeeper-era one, which decides the same way.
AUTHORIZER_CLASSES = frozenset(
    {
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
    }
)


class SecurityError(Exception):
    """A connection refused by security (e.g. no principal for its certificate)."""


class BrokerSecurity:
    def __init__(self, data_dir: Path, config: BrokerConfig, listeners: list[Listener]) -> None:
        self.config = config
        folder = Path(data_dir) / SECURITY_DIR
        self.credentials = ScramCredentialStore(folder / "scram-credentials.json")
        self.acls = AclStore(folder / "acls.json")
        self.authorizer = self._authorizer()
        self.ssl_contexts = {
            lst.name: server_ssl_context(config, lst.name) for lst in listeners if lst.uses_tls
        }
        self.mappers = {
            lst.name: self._mapper(lst) for lst in listeners if lst.uses_tls and not lst.uses_sasl
        }
        self.mechanisms: dict[str, list[str]] = {}
        self.plain_users: dict[str, dict[str, str]] = {}
        for lst in listeners:
            if lst.uses_sasl:
                self.mechanisms[lst.name] = self._mechanisms(lst)
                self.plain_users[lst.name] = self._plain_users(lst)
        # The listener brokers reach each other on (a cluster's control plane replaces it
        # with the full form, this broker's credentials included: cluster/node.py).
        self.inter_broker = inter_broker(config, listeners, as_client=False)

    def _authorizer(self) -> StandardAuthorizer | None:
        name = str(self.config["authorizer.class.name"]).strip()
        if not name:
            return None
        if name not in AUTHORIZER_CLASSES:
            raise ConfigError(
                f"authorizer.class.name={name}: Odradek has Kafka's ACL authorizer only, "
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            )
        super_users = str(self.config["super.users"]).split(";")
        for user in super_users:
            if user.strip():
                try:
                    KafkaPrincipal.parse(user.strip())
                except PrincipalError as exc:
                    raise ConfigError(f"super.users: {exc}") from None
        return StandardAuthorizer(
            self.acls, super_users, bool(self.config["allow.everyone.if.no.acl.found"])
        )

    def _mapper(self, listener: Listener) -> SslPrincipalMapper:
        rules = str(listener_value(self.config, listener.name, "ssl.principal.mapping.rules"))
        try:
            return SslPrincipalMapper(rules)
        except PrincipalError as exc:
            raise ConfigError(str(exc)) from None

    def _mechanisms(self, listener: Listener) -> list[str]:
        raw = format_value(listener_value(self.config, listener.name, "sasl.enabled.mechanisms"))
        mechanisms = [m.strip().upper() for m in raw.split(",") if m.strip()]
        unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if unsupported or not mechanisms:
            raise ConfigError(
                f"sasl.enabled.mechanisms for listener {listener.name}: "
                f"{', '.join(unsupported) or 'none given'}; Odradek supports "
                f"{', '.join(SUPPORTED_MECHANISMS)}"
            )
        return mechanisms

    def _plain_users(self, listener: Listener) -> dict[str, str]:
        prefixed = f"listener.name.{listener.name.lower()}.plain.sasl.jaas.config"
        if self.config.is_default(prefixed):
            return {}
        try:
            return parse_jaas(str(self.config[prefixed])).plain_users
        except JaasError as exc:
            raise ConfigError(f"{prefixed}: {exc}") from None

    # --- per connection ----------------------------------------------------------------

    def session(self, listener: Listener, client_host: str, peercert: Any) -> Session:
        """The security state of a new connection (TLS, if any, is already done)."""
        principal = ANONYMOUS
        mapper = self.mappers.get(listener.name)
        if mapper is not None and peercert:
            try:
                principal = KafkaPrincipal("User", mapper.name(subject_dn(peercert)))
            except PrincipalError as exc:
                raise SecurityError(str(exc)) from None
        return Session(self, listener, client_host, principal)

    def sasl_server(self, listener: Listener, mechanism: str) -> SaslServer:
        return new_sasl_server(mechanism, self.plain_users.get(listener.name, {}), self.credentials)

    def max_reauth_ms(self, listener: Listener) -> int:
        return int(listener_value(self.config, listener.name, "connections.max.reauth.ms"))

    # --- start-up ----------------------------------------------------------------------

    def add_initial_users(self, users: list[InitialScramUser]) -> None:
        """``--add-scram``: create each credential unless that user already has one for
        the mechanism (as Kafka's storage tool, it only seeds a new cluster)."""
        upserts = []
        for user in users:
            if self.credentials.get(user.name, user.mechanism) is not None:
                log.info("--add-scram %s for %s ignored: exists", user.mechanism.name, user.name)
                continue
            upserts.append((user.name, user.mechanism, user.credential()))
            log.info("added %s credential for %s", user.mechanism.name, user.name)
        if upserts:
            self.credentials.apply(upserts, [])
