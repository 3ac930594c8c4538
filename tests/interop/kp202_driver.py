"""Run by the kafka-python 2.0.2 interpreter (see conftest.kp202_python), not by pytest.

    python kp202_driver.py IN.json OUT.json

IN: {"bootstrap", "topic", "partitions", "timeout_s",
     "records": [[partition, key_hex|null, value_hex|null, [[header_key, value_hex], ...]], ...]}
OUT: {"kafka_python": version, "create": repr, "acks": [[partition, offset], ...] (send order),
      "consumed": {partition: [[offset, key_hex|null, value_hex|null, headers], ...]}}

Creates the topic with KafkaAdminClient, produces every record to its partition,
then reads the partitions back with assign() (no consumer group). Only the
standard library and kafka-python are imported, so it runs in the bare venv.
"""

import json
import sys
import time

import kafka
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic


def unhex(text):
    return None if text is None else bytes.fromhex(text)


def tohex(data):
    return None if data is None else data.hex()


def main(in_path, out_path):
    with open(in_path) as f:
        spec = json.load(f)
    bootstrap = spec["bootstrap"]
    topic = spec["topic"]
    partitions = spec["partitions"]
    deadline = time.monotonic() + spec["timeout_s"]
    out = {"kafka_python": kafka.__version__}

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kp202-admin")
    try:
        result = admin.create_topics(
            [NewTopic(name=topic, num_partitions=partitions, replication_factor=1)],
            timeout_ms=15000,
        )
        out["create"] = repr(result)
    finally:
        admin.close()

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, client_id="kp202-producer", acks="all", linger_ms=5
    )
    futures = []
    for partition, key, value, headers in spec["records"]:
        futures.append(
            producer.send(
                topic,
                key=unhex(key),
                value=unhex(value),
                headers=[(k, unhex(v)) for k, v in headers],
                partition=partition,
            )
        )
    producer.flush(timeout=max(1.0, deadline - time.monotonic()))
    acks = []
    for future in futures:
        meta = future.get(timeout=max(1.0, deadline - time.monotonic()))
        acks.append([meta.partition, meta.offset])
    out["acks"] = acks
    producer.close(timeout=10)

    want = {}
    for partition, _k, _v, _h in spec["records"]:
        want[partition] = want.get(partition, 0) + 1
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id="kp202-consumer",
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    consumed = {p: [] for p in range(partitions)}
    while time.monotonic() < deadline:
        if all(len(consumed[p]) >= want.get(p, 0) for p in consumed):
            break
        batch = consumer.poll(timeout_ms=500, max_records=5000)
        for tp, messages in batch.items():
            for m in messages:
                consumed[tp.partition].append(
                    [m.offset, tohex(m.key), tohex(m.value), [[k, tohex(v)] for k, v in m.headers]]
                )
    consumer.close()
    out["consumed"] = consumed
    with open(out_path, "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
