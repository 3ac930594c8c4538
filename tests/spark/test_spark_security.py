"""The Spark source and sink against a secured broker: SASL_SSL with SCRAM-SHA-512 and
ACLs, configured with the ``kafka.security.protocol`` / ``kafka.sasl.*`` /
``kafka.ssl.*`` options Spark's Kafka connector takes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.client import (
    AclBinding,
    AclOperation,
    AclPermission,
    AdminClient,
    NewTopic,
    PatternType,
    ResourceType,
    UserScramCredentialUpsertion,
)
from odradek.testing import BrokerProcess
from odradek.testing_tls import make_pki

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("spark-secure")
    pki = make_pki(base / "pki")
    broker = BrokerProcess(
        base / "data",
        listeners={"SASL_SSL": "SASL_SSL"},
        settings={
            "ssl.keystore.location": str(pki.server_keystore),
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
        },
        extra_args=["--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret]"],
    ).start()
    common = {
        "bootstrap_servers": broker.bootstrap,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "ssl_cafile": str(pki.ca_cert),
    }
    try:
        yield {"broker": broker, "pki": pki, "common": common}
    finally:
        broker.stop()


def _spark_options(secured: dict[str, Any], user: str, password: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": secured["broker"].bootstrap,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        f'required username="{user}" password="{password}";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(Path(secured["pki"].ca_cert)),
    }


def test_spark_writes_and_reads_with_security_options(spark, secured, topic) -> None:
    admin = AdminClient(
        **secured["common"], sasl_plain_username="admin", sasl_plain_password="admin-secret"
    )
    try:
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result()
        changes = [UserScramCredentialUpsertion("spark-job", "SCRAM-SHA-512", "spark-pw")]
        admin.alter_user_scram_credentials(changes)["spark-job"].result()
        acls = [
            AclBinding(
                ResourceType.TOPIC,
                topic,
                PatternType.LITERAL,
                "User:spark-job",
                "*",
                op,
                AclPermission.ALLOW,
            )
            for op in (AclOperation.WRITE, AclOperation.READ)
        ]
        for future in admin.create_acls(acls).values():
            future.result()
    finally:
        admin.close()
    options = _spark_options(secured, "spark-job", "spark-pw")
    rows = [(f"k{i}", f"v{i}") for i in range(40)]
    df = spark.createDataFrame(rows, "key string, value string")
    df.write.mode("append").format("odradek").options(**options).option("topic", topic).save()
    read = spark.read.format("odradek").options(**options).option("subscribe", topic).load()
    got = sorted((r.key.decode(), r.value.decode()) for r in read.collect())
    assert got == sorted(rows)

    wrong = {
        **options,
        "kafka.sasl.jaas.config": options["kafka.sasl.jaas.config"].replace("spark-pw", "not-it"),
    }
    with pytest.raises(Exception, match=r"(?i)authentication"):
        spark.read.format("odradek").options(**wrong).option("subscribe", topic).load().collect()
