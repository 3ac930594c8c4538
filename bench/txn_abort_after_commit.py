"""An abort right after a commit: does librdkafka's transactional producer end in a fatal error?

Issue 21's soak found librdkafka's transactional producer failing with a fatal
INVALID_TXN_STATE from ``abort_transaction``: the application aborted while the
next transaction's AddPartitionsToTxn was refused with CONCURRENT_TRANSACTIONS
(the previous commit's markers were still being written), and librdkafka then
sent EndTxn(abort) for a transaction the coordinator never began. Kafka's
transaction coordinator (transaction version 1) refuses an abort in
PrepareCommit or CompleteCommit with INVALID_TXN_STATE. This script shows what a
running broker answers: each of ``--producers`` transactional producers runs
``--pairs`` times "begin, send one record, commit; begin, send one record,
abort at once", and the outcomes are counted with librdkafka's own account of
each EndTxn answer (``debug=eos``).

    python3 bench/txn_abort_after_commit.py --bootstrap 127.0.0.1:9092     # any broker
    KAFKA_WORK=/tmp/kafka-anchor python3 bench/txn_abort_after_commit.py --kafka
    python3 bench/txn_abort_after_commit.py --odradek                      # a fresh odradek serve

``--kafka`` starts the reference build's single node (``start_kafka.sh``) and
``--odradek`` a single ``odradek serve``, each in a temporary directory, stopped
at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka import libversion as rdkafka_version
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.testing import BrokerProcess, free_port

ENDTXN_ANSWER = re.compile(r"EndTxn returned (\w+) in state (\w+)")
PARTITIONS = 3


def run(bootstrap: str, producers: int, pairs: int, log_path: Path) -> dict[str, Counter[str]]:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    topic = f"txn-abort-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=60)
    client_log = logging.getLogger("txn-abort.librdkafka")
    client_log.propagate = False
    handler = logging.FileHandler(log_path)
    client_log.addHandler(handler)
    client_log.setLevel(logging.DEBUG)
    outcomes: Counter[str] = Counter()
    try:
        for _ in range(producers):
            producer = Producer(
                {
                    "bootstrap.servers": bootstrap,
                    "transactional.id": f"txn-abort-{uuid.uuid4().hex[:8]}",
                    "linger.ms": 0,
                    "debug": "eos",
                    "logger": client_log,
                }
            )
            producer.init_transactions(30)
            try:
                for pair in range(pairs):
                    producer.begin_transaction()
                    producer.produce(topic, value=b"committed", partition=pair % PARTITIONS)
                    producer.commit_transaction(30)
                    producer.begin_transaction()
                    producer.produce(topic, value=b"aborted", partition=(pair + 1) % PARTITIONS)
                    producer.poll(0)
                    producer.abort_transaction(30)
                outcomes[f"all {pairs} pairs done"] += 1
            except KafkaException as exc:
                error = exc.args[0]
                kind = "fatal" if error.fatal() else ""
                kind = kind or ("abortable" if error.txn_requires_abort() else "")
                outcomes[f"{kind} {error.name()}".strip()] += 1
            with contextlib.suppress(KafkaException):
                producer.flush(5)
    finally:
        handler.close()
        client_log.removeHandler(handler)
    answers: Counter[str] = Counter()
    for line in log_path.read_text(errors="replace").splitlines():
        found = ENDTXN_ANSWER.search(line)
        if found:
            answers[f"{found.group(1)} in {found.group(2)}"] += 1
    return {"producers": outcomes, "EndTxn answers": answers}


@contextlib.contextmanager
def broker(args: argparse.Namespace, root: Path) -> Iterator[str]:
    if args.bootstrap:
        yield args.bootstrap
    elif args.kafka:
        work = Path(os.environ.get("KAFKA_WORK", ""))
        if not (work / "start_kafka.sh").is_file():
            raise SystemExit("--kafka: KAFKA_WORK must name a reference Kafka build")
        port = free_port()
        data = root / "kafka"
        subprocess.run(
            [str(work / "start_kafka.sh"), str(port), str(data)],
            check=True,
            env={**os.environ, "KAFKA_START_TIMEOUT": "300"},
        )
        try:
            yield f"127.0.0.1:{port}"
        finally:
            subprocess.run([str(work / "start_kafka.sh"), "stop", str(data)], check=False)
    else:
        with BrokerProcess(root / "odradek") as process:
            yield process.bootstrap


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap", help="a running broker")
    where.add_argument("--kafka", action="store_true", help="start Kafka 4.1.1 (KAFKA_WORK)")
    where.add_argument("--odradek", action="store_true", help="start odradek serve")
    parser.add_argument("--producers", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=20, help="commit/abort pairs per producer")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="txn-abort-") as tmp:
        root = Path(tmp)
        with broker(args, root) as bootstrap:
            result = run(bootstrap, args.producers, args.pairs, root / "librdkafka.log")
    print(f"librdkafka {rdkafka_version()[0]}, {args.producers} producers x {args.pairs} pairs")
    for name, counts in result.items():
        print(f"{name}: " + ", ".join(f"{key} {n}" for key, n in counts.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
