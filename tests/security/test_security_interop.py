"""confluent-kafka, kafka-python and aiokafka against a secured Odradek, with their usual
security settings unchanged: over SASL_SSL with SCRAM-SHA-512, and over SSL with a
client certificate (the principal is the certificate's subject).

Each client, as a principal that has only the ACLs it needs, produces, consumes in a
group, commits, reads the commit back and lists topics (seeing only its own: Metadata
hides the others). A wrong password fails with SASL_AUTHENTICATION_FAILED; the super
user needs no ACL; the ACL and SCRAM admin APIs work from the third-party admin clients.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from secure import ADMIN, SecureBroker, unique

from odradek.client import AclOperation, ResourceType

N = 20
pytestmark = [pytest.mark.embedded, pytest.mark.timeout(120)]


# --- one driver per client library ----------------------------------------------------


def _values(n: int) -> list[bytes]:
    return [b"record-%03d" % i for i in range(n)]


class Confluent:
    @staticmethod
    def produce(settings: dict[str, Any], topic: str, n: int) -> None:
        from confluent_kafka import Producer

        producer = Producer({**settings, "linger.ms": 5})
        errors: list[Any] = []
        for i, value in enumerate(_values(n)):
            producer.produce(
                topic, value=value, partition=i % 2, on_delivery=lambda e, m: errors.append(e)
            )
        assert producer.flush(30) == 0
        assert errors == [None] * n

    @staticmethod
    def consume(settings: dict[str, Any], topic: str, group: str, n: int) -> list[bytes]:
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                **settings,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        try:
            while len(got) < n and time.monotonic() < deadline:
                for msg in consumer.consume(num_messages=100, timeout=0.5):
                    assert msg.error() is None, msg.error()
                    got.append(msg.value())
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        return got

    @staticmethod
    def committed(settings: dict[str, Any], topic: str, group: str) -> dict[int, int]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({**settings, "group.id": group})
        try:
            offsets = consumer.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=20)
        finally:
            consumer.close()
        return {tp.partition: tp.offset for tp in offsets}

    @staticmethod
    def topics(settings: dict[str, Any]) -> set[str]:
        from confluent_kafka.admin import AdminClient

        return set(AdminClient(settings).list_topics(timeout=20).topics)


class KafkaPython:
    @staticmethod
    def produce(settings: dict[str, Any], topic: str, n: int) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(**settings, linger_ms=5)
        try:
            futures = [
                producer.send(topic, value=v, partition=i % 2) for i, v in enumerate(_values(n))
            ]
            for future in futures:
                future.get(timeout=30)
        finally:
            producer.close()

    @staticmethod
    def consume(settings: dict[str, Any], topic: str, group: str, n: int) -> list[bytes]:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(
            topic,
            **settings,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        try:
            while len(got) < n and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    got.extend(r.value for r in records)
            consumer.commit()
        finally:
            consumer.close()
        return got

    @staticmethod
    def committed(settings: dict[str, Any], topic: str, group: str) -> dict[int, int]:
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(**settings)
        try:
            offsets = admin.list_group_offsets({group: None})[group]
        finally:
            admin.close()
        return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}

    @staticmethod
    def topics(settings: dict[str, Any]) -> set[str]:
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(**settings)
        try:
            return set(admin.list_topics())
        finally:
            admin.close()


class AioKafka:
    @staticmethod
    def produce(settings: dict[str, Any], topic: str, n: int) -> None:
        from aiokafka import AIOKafkaProducer

        async def main() -> None:
            producer = AIOKafkaProducer(**settings)
            await producer.start()
            try:
                for i, value in enumerate(_values(n)):
                    await producer.send_and_wait(topic, value=value, partition=i % 2)
            finally:
                await producer.stop()

        asyncio.run(main())

    @staticmethod
    def consume(settings: dict[str, Any], topic: str, group: str, n: int) -> list[bytes]:
        from aiokafka import AIOKafkaConsumer

        async def main() -> list[bytes]:
            consumer = AIOKafkaConsumer(
                topic,
                **settings,
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            )
            await consumer.start()
            got: list[bytes] = []
            try:
                deadline = time.monotonic() + 60
                while len(got) < n and time.monotonic() < deadline:
                    batches = await consumer.getmany(timeout_ms=500)
                    for records in batches.values():
                        got.extend(r.value for r in records)
                await consumer.commit()
            finally:
                await consumer.stop()
            return got

        return asyncio.run(main())

    @staticmethod
    def committed(settings: dict[str, Any], topic: str, group: str) -> dict[int, int]:
        from aiokafka.admin import AIOKafkaAdminClient

        async def main() -> dict[int, int]:
            admin = AIOKafkaAdminClient(**settings)
            await admin.start()
            try:
                offsets = await admin.list_consumer_group_offsets(group)
            finally:
                await admin.close()
            return {tp.partition: m.offset for tp, m in offsets.items() if tp.topic == topic}

        return asyncio.run(main())

    @staticmethod
    def topics(settings: dict[str, Any]) -> set[str]:
        from aiokafka.admin import AIOKafkaAdminClient

        async def main() -> set[str]:
            admin = AIOKafkaAdminClient(**settings)
            await admin.start()
            try:
                return set(await admin.list_topics())
            finally:
                await admin.close()

        return asyncio.run(main())


DRIVERS = {"confluent": Confluent, "kafka_python": KafkaPython, "aiokafka": AioKafka}


# --- the tests -------------------------------------------------------------------------


def _principal(broker: SecureBroker, lib: str, auth: str) -> tuple[str, dict[str, Any]]:
    """A fresh principal (a SCRAM user or a client certificate) and its client settings."""
    name = unique(lib.replace("_", "-"))
    if auth == "sasl_scram":
        broker.add_user(name)
        return f"User:{name}", getattr(broker, lib)(name)
    certificate = broker.pki.client(name)
    return certificate.principal, getattr(broker, f"{lib}_cert")(name)


@pytest.mark.parametrize("auth", ["sasl_scram", "ssl_cert"])
@pytest.mark.parametrize("lib", sorted(DRIVERS))
def test_client_with_its_usual_security_settings(
    secure_broker: SecureBroker, lib: str, auth: str
) -> None:
    driver = DRIVERS[lib]
    principal, settings = _principal(secure_broker, lib, auth)
    topic = secure_broker.create_topic(unique(f"sec-{lib}"), partitions=2)
    group = unique(f"sec-{lib}-group")
    secure_broker.grant(principal, ResourceType.TOPIC, topic, AclOperation.WRITE, AclOperation.READ)
    secure_broker.grant(principal, ResourceType.GROUP, group, AclOperation.READ)
    secure_broker.create_topic(unique("not-for-you"))  # Metadata must hide this one

    driver.produce(settings, topic, N)
    assert sorted(driver.consume(settings, topic, group, N)) == _values(N)
    assert driver.committed(settings, topic, group) == {0: N // 2, 1: N // 2}
    assert driver.topics(settings) == {topic}


@pytest.mark.parametrize("lib", sorted(DRIVERS))
def test_wrong_password_is_refused(
    secure_broker: SecureBroker, lib: str, caplog: pytest.LogCaptureFixture
) -> None:
    user = unique("victim")
    secure_broker.add_user(user)
    settings = getattr(secure_broker, lib)(user, password="not-the-password")
    if lib == "confluent":
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient

        errors: list[Any] = []
        admin = AdminClient({**settings, "error_cb": errors.append, "log_level": 0})
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=5)
        admin.poll(1)  # serves error_cb
        del admin
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
        assert any("Authentication failed" in e.str() for e in errors), errors
    elif lib == "kafka_python":  # it logs the broker's error and retries until its timeout
        with pytest.raises(Exception, match="Unable to bootstrap"):
            KafkaPython.topics({**settings, "bootstrap_timeout_ms": 3000})
        assert "[Error 58] SaslAuthenticationFailedError" in caplog.text
    else:  # aiokafka logs the broker's error, then gives up bootstrapping
        with pytest.raises(Exception, match="Unable to bootstrap"):
            AioKafka.topics(settings)
        assert "[Error 58] SaslAuthenticationFailed" in caplog.text


def test_super_user_needs_no_acl(secure_broker: SecureBroker) -> None:
    topic = secure_broker.create_topic(unique("sec-super"), partitions=2)
    settings = secure_broker.confluent(ADMIN)
    Confluent.produce(settings, topic, N)
    assert sorted(Confluent.consume(settings, topic, unique("super-group"), N)) == _values(N)
    admin_cert = secure_broker.kafka_python_cert("admin")  # User:CN=admin is a super user too
    assert topic in KafkaPython.topics(admin_cert)


def test_acl_and_scram_admin_apis_from_third_party_clients(secure_broker: SecureBroker) -> None:
    """kafka-python creates a SCRAM user and ACLs; confluent-kafka describes and deletes
    them; the new user then works (SCRAM-SHA-256, salted by kafka-python)."""
    from confluent_kafka.admin import AclBindingFilter as CkFilter
    from confluent_kafka.admin import AclOperation as CkOp
    from confluent_kafka.admin import AclPermissionType as CkPermission
    from confluent_kafka.admin import AdminClient as CkAdmin
    from confluent_kafka.admin import ResourcePatternType as CkPattern
    from confluent_kafka.admin import ResourceType as CkResource
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        ResourcePattern,
        ResourceType,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    user = unique("kp-made")
    topic = secure_broker.create_topic(unique("sec-adminapi"))
    kp_admin = KafkaAdminClient(**secure_broker.kafka_python(ADMIN))
    try:
        kp_admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, ScramMechanism.SCRAM_SHA_256, "kp-password")]
        )
        acl = ACL(
            f"User:{user}",
            "*",
            ACLOperation.DESCRIBE,
            ACLPermissionType.ALLOW,
            ResourcePattern(ResourceType.TOPIC, topic),
        )
        result = kp_admin.create_acls([acl])
        assert not result["failed"], result
    finally:
        kp_admin.close()

    from kafka import KafkaAdminClient as UserAdmin

    as_user = {
        **secure_broker.kafka_python(user, password="kp-password"),
        "sasl_mechanism": "SCRAM-SHA-256",
    }
    user_admin = UserAdmin(**as_user)
    try:
        assert set(user_admin.list_topics()) == {topic}
    finally:
        user_admin.close()

    ck_admin = CkAdmin(secure_broker.confluent(ADMIN))
    flt = CkFilter(
        CkResource.TOPIC,
        topic,
        CkPattern.LITERAL,
        f"User:{user}",
        None,
        CkOp.ANY,
        CkPermission.ANY,
    )
    described = ck_admin.describe_acls(flt).result(timeout=20)
    assert [(a.name, a.principal, a.operation) for a in described] == [
        (topic, f"User:{user}", CkOp.DESCRIBE)
    ]
    deleted = ck_admin.delete_acls([flt])[flt].result(timeout=20)
    assert len(deleted) == 1
    described_user = ck_admin.describe_user_scram_credentials([user])[user].result(timeout=20)
    assert [i.mechanism.name for i in described_user.scram_credential_infos] == ["SCRAM_SHA_256"]
