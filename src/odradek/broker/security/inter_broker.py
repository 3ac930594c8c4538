"""How this broker talks to the other brokers, and who may act as one.

The inter-broker listener is Kafka's (KafkaConfig.getInterBrokerListenerNameAndSecurityProtocol,
Kafka 4.x): ``inter.broker.listener.name`` names it, else it is the listener named after
``security.inter.broker.protocol`` (default PLAINTEXT); the two settings may not both be
set. It must be an advertised listener, and on a SASL listener
``sasl.mechanism.inter.broker.protocol`` must be one of its ``sasl.enabled.mechanisms``
(KafkaConfig.validateValues). Kafka's messages are kept.

A broker connecting to another (replica fetches, transaction markers:
``odradek.cluster.peer_connection``) uses the same settings that listener serves with,
as Kafka's BrokerBlockingSender builds its channel with
``ChannelBuilders.clientChannelBuilder(interBrokerSecurityProtocol, JaasContext.Type.SERVER,
..., interBrokerListenerName, saslMechanismInterBrokerProtocol, ...)``:

* SASL: ``username`` / ``password`` of ``listener.name.<l>.<mechanism>.sasl.jaas.config``
  (the listener's server JAAS context, JaasContext.loadServerContext).
* TLS: the listener's truststore verifies the peer, its keystore is the client
  certificate (used when the peer asks for one, ``ssl.client.auth``), and
  ``ssl.endpoint.identification.algorithm=https`` (the default) checks the host name.

Who may act as a replica (`RequestContext.may_act_as_replica`): Kafka checks
CLUSTER_ACTION on the cluster for a follower's Fetch (KafkaApis.handleFetchRequest)
and OffsetsForLeaderEpoch, which without an authorizer lets anyone in; it does not
look at the listener (a follower's Fetch is served on any). Odradek also refuses
replica requests that come in on any listener other than the inter-broker one:
Kafka's own followers only ever use that listener, so no Kafka broker or client is
turned away, and a client listener left open (PLAINTEXT, no authorizer) cannot be
used to pose as a follower and move a high watermark.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from odradek.broker.config import BrokerConfig, ConfigError, format_value
from odradek.broker.security.listeners import PROTOCOLS, Listener, listener_value
from odradek.protocol.jaas import JaasError, parse_jaas

LISTENER_NAME = "inter.broker.listener.name"
SECURITY_PROTOCOL = "security.inter.broker.protocol"
SASL_MECHANISM = "sasl.mechanism.inter.broker.protocol"
SETTINGS = (LISTENER_NAME, SECURITY_PROTOCOL, SASL_MECHANISM)


@dataclass(frozen=True)
class InterBroker:
    """The inter-broker listener and this broker's credentials as a client of it."""

    listener: str
    protocol: str
    mechanism: str | None = None  # SASL protocols only
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)  # TLS protocols

    @property
    def uses_sasl(self) -> bool:
        return self.mechanism is not None


def _listener_and_protocol(config: BrokerConfig, listeners: list[Listener]) -> tuple[str, str]:
    name = str(config[LISTENER_NAME]).strip()
    if name:
        if not config.is_default(SECURITY_PROTOCOL):
            raise ConfigError(f"Only one of {LISTENER_NAME} and {SECURITY_PROTOCOL} should be set.")
        name = name.upper()
        protocol = next((lst.protocol for lst in listeners if lst.name == name), None)
        if protocol is None:
            # Kafka looks the name up in the protocol map first; Odradek's listeners carry it.
            raise ConfigError(
                f"{LISTENER_NAME} must be a listener name defined in advertised.listeners. "
                f"The valid options based on currently configured listeners are "
                f"{','.join(lst.name for lst in listeners)}"
            )
        return name, protocol
    protocol = str(config[SECURITY_PROTOCOL]).strip().upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(
            f"Invalid value {protocol} for configuration {SECURITY_PROTOCOL}: "
            f"must be one of {', '.join(PROTOCOLS)}"
        )
    if not any(lst.name == protocol for lst in listeners):
        raise ConfigError(
            f"{LISTENER_NAME} must be a listener name defined in advertised.listeners. "
            f"The valid options based on currently configured listeners are "
            f"{','.join(lst.name for lst in listeners)} (no {LISTENER_NAME} set: "
            f"{SECURITY_PROTOCOL}={protocol} names the listener)"
        )
    return protocol, protocol


def _credentials(config: BrokerConfig, listener: str, mechanism: str) -> tuple[str, str]:
    setting = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    if config.is_default(setting):
        raise ConfigError(
            f"{setting} is needed: the username and password this broker authenticates "
            f"to other brokers with ({SASL_MECHANISM}={mechanism} on listener {listener})"
        )
    try:
        options = parse_jaas(str(config[setting])).options
    except JaasError as exc:
        raise ConfigError(f"{setting}: {exc}") from None
    username, password = options.get("username"), options.get("password")
    if not username or password is None:
        raise ConfigError(
            f'{setting} needs username="..." and password="...": the credentials this '
            "broker authenticates to other brokers with"
        )
    return username, password


def client_ssl_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The TLS context of this broker as a client of another broker's listener."""

    def get(name: str) -> str:
        return format_value(listener_value(config, listener, name) or "").strip()

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    trust_location, trust_inline = (
        get("ssl.truststore.location"),
        get("ssl.truststore.certificates"),
    )
    try:
        if trust_location:
            context.load_verify_locations(cafile=trust_location)
        elif trust_inline:
            context.load_verify_locations(cadata=trust_inline)
        else:
            context.load_default_certs()
        location = get("ssl.keystore.location")
        if location:
            context.load_cert_chain(location, password=get("ssl.key.password") or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"{LISTENER_NAME} {listener}: cannot build the TLS client context: {exc}"
        ) from None
    # Kafka's default "https" checks the peer's certificate names the host connected to.
    context.check_hostname = get("ssl.endpoint.identification.algorithm").lower() == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def inter_broker(
    config: BrokerConfig, listeners: list[Listener], *, as_client: bool
) -> InterBroker | None:
    """The inter-broker listener, checked as Kafka checks it at start, and with
    `as_client` this broker's credentials and TLS context as a client of it.

    Without `as_client` (what every broker knows: `BrokerSecurity`; a lone node has no
    other broker to connect to) the settings are checked only when one of them is set
    (a ported Kafka configuration), None when none is, and no credentials are read (a
    ported configuration may keep them in a JAAS file, which Odradek does not read).
    A cluster's control plane resolves them `as_client` (`odradek.cluster.node`).
    """
    if not as_client and all(config.is_default(s) for s in SETTINGS):
        return None
    name, protocol = _listener_and_protocol(config, listeners)
    mechanism = username = password = None
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = str(config[SASL_MECHANISM]).strip().upper()
        enabled = [
            m.strip().upper()
            for m in format_value(listener_value(config, name, "sasl.enabled.mechanisms")).split(
                ","
            )
            if m.strip()
        ]
        if mechanism not in enabled:
            raise ConfigError(
                f"{SASL_MECHANISM} must be included in sasl.enabled.mechanisms when SASL is "
                f"used for inter-broker communication ({SASL_MECHANISM}={mechanism}, "
                f"listener {name} enables {','.join(enabled)})"
            )
        if not as_client:
            return InterBroker(name, protocol, mechanism)
        username, password = _credentials(config, name, mechanism)
    context = None
    if protocol in ("SSL", "SASL_SSL") and as_client:
        context = client_ssl_context(config, name)
    return InterBroker(name, protocol, mechanism, username, password, context)
