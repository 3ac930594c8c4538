"""The inter-broker listener settings, checked as Kafka checks them at start
(KafkaConfig), the broker's own credentials for it, and who may act as a replica."""

from __future__ import annotations

import re
import ssl
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.context import RequestContext
from odradek.broker.security.inter_broker import InterBroker, inter_broker
from odradek.broker.security.listeners import parse_listeners
from odradek.testing_tls import Pki

JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="broker" password="broker-secret";'
)


def two_listeners(**extra: str) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,REPLICATION://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:SASL_SSL",
        **extra,
    }


def resolve(cluster: bool = True, **settings: str) -> InterBroker | None:
    """As a cluster's control plane resolves them (`as_client`), or a lone node."""
    config = BrokerConfig()
    for name, value in settings.items():
        config.set(name, value)
    listeners = parse_listeners(config, ("127.0.0.1", 9092))
    return inter_broker(config, listeners, as_client=cluster)


def test_a_cluster_broker_defaults_to_the_plaintext_listener() -> None:
    found = resolve()
    assert found == InterBroker("PLAINTEXT", "PLAINTEXT")
    assert not found.uses_sasl and found.ssl_context is None


def test_a_single_node_without_the_settings_has_no_inter_broker_listener() -> None:
    assert resolve(cluster=False) is None


def test_both_ways_of_naming_it_at_once_are_refused_with_kafkas_message() -> None:
    with pytest.raises(ConfigError) as refused:
        resolve(
            **{"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "SSL"}
        )
    assert str(refused.value) == (
        "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."
    )


def test_a_listener_that_is_not_advertised_is_refused() -> None:
    with pytest.raises(ConfigError, match="must be a listener name defined in advertised"):
        resolve(**{"inter.broker.listener.name": "INTERNAL"})


def test_the_default_protocol_needs_a_listener_of_that_name() -> None:
    with pytest.raises(
        ConfigError, match=re.escape("security.inter.broker.protocol=PLAINTEXT names")
    ):
        resolve(
            listeners="SASL_SSL://127.0.0.1:0",
            **{"ssl.keystore.location": "/nonexistent"},
        )


def test_the_sasl_mechanism_must_be_enabled_on_the_listener() -> None:
    with pytest.raises(ConfigError, match=re.escape("must be included in sasl.enabled.mechanisms")):
        # Kafka's default mechanism is GSSAPI, which Odradek does not offer
        resolve(**two_listeners(**{"inter.broker.listener.name": "REPLICATION"}))


def test_a_sasl_inter_broker_listener_needs_the_brokers_own_credentials(pki: Pki) -> None:
    settings = two_listeners(
        **{
            "inter.broker.listener.name": "REPLICATION",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "ssl.keystore.location": str(pki.server_keystore),
        }
    )
    with pytest.raises(
        ConfigError, match=re.escape("listener.name.replication.scram-sha-512.sasl.jaas")
    ):
        resolve(**settings)
    no_password = JAAS.replace(' password="broker-secret"', "")
    with pytest.raises(ConfigError, match="needs username"):
        resolve(
            **settings, **{"listener.name.replication.scram-sha-512.sasl.jaas.config": no_password}
        )


def test_credentials_and_tls_come_from_the_listeners_settings(pki: Pki) -> None:
    found = resolve(
        **two_listeners(
            **{
                "inter.broker.listener.name": "replication",  # normalised, as Kafka
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "listener.name.replication.scram-sha-512.sasl.jaas.config": JAAS,
                "listener.name.replication.ssl.keystore.location": str(pki.server_keystore),
                "listener.name.replication.ssl.truststore.location": str(pki.ca_cert),
            }
        )
    )
    assert found is not None
    assert (found.listener, found.protocol, found.mechanism) == (
        "REPLICATION",
        "SASL_SSL",
        "SCRAM-SHA-512",
    )
    assert (found.username, found.password) == ("broker", "broker-secret")
    assert "broker-secret" not in repr(found)
    context = found.ssl_context
    assert context is not None
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    assert context.get_ca_certs(), "the listener's truststore verifies the peer"


def test_no_endpoint_identification_turns_the_host_name_check_off(pki: Pki) -> None:
    found = resolve(
        **{
            "security.inter.broker.protocol": "SSL",
            "listeners": "SSL://127.0.0.1:0",
            "ssl.keystore.location": str(pki.server_keystore),
            "ssl.truststore.location": str(pki.ca_cert),
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert found is not None and found.ssl_context is not None
    assert found.protocol == "SSL" and not found.ssl_context.check_hostname
    assert found.ssl_context.verify_mode is ssl.CERT_REQUIRED


def test_a_ported_single_node_configuration_needs_no_credentials() -> None:
    found = resolve(
        cluster=False,
        **two_listeners(
            **{
                "inter.broker.listener.name": "REPLICATION",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "ssl.keystore.location": "/nonexistent",
            }
        ),
    )
    assert found == InterBroker("REPLICATION", "SASL_SSL", "SCRAM-SHA-512")


def test_serve_refuses_a_bad_combination_in_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "odradek",
            "serve",
            "--data-dir",
            str(tmp_path),
            "--etcd",
            "127.0.0.1:1",
            "--set",
            "inter.broker.listener.name=PLAINTEXT",
            "--set",
            "security.inter.broker.protocol=PLAINTEXT",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Only one of inter.broker.listener.name" in lines[0], lines


def request_context(listener: str, allowed: bool, inter: str | None) -> SimpleNamespace:
    """What `RequestContext.may_act_as_replica` reads, the authorizer's answer given."""
    security = SimpleNamespace(inter_broker=InterBroker(inter, "SASL_SSL") if inter else None)
    return SimpleNamespace(
        broker=SimpleNamespace(security=security),
        listener_name=listener,
        authorize=lambda *_: allowed,
    )


@pytest.mark.parametrize(
    ("listener", "allowed", "inter", "served"),
    [
        ("REPLICATION", True, "REPLICATION", True),
        ("REPLICATION", False, "REPLICATION", False),  # no CLUSTER_ACTION
        ("PLAINTEXT", True, "REPLICATION", False),  # not the inter-broker listener
        ("PLAINTEXT", True, None, True),  # a single node: Kafka's rule alone
    ],
)
def test_who_may_act_as_a_replica(listener: str, allowed: bool, inter: str, served: bool) -> None:
    context = request_context(listener, allowed, inter)
    assert RequestContext.may_act_as_replica(context) is served  # type: ignore[arg-type]
