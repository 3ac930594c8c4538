"""`odradek transactions list|describe`: transactional ids and their open transactions
(ListTransactions / DescribeTransactions, KIP-664), like ``kafka-transactions.sh``.

    odradek transactions list
    odradek transactions list --state Ongoing --duration-ms 60000   # stuck for a minute
    odradek transactions describe etl-1

Describe shows the producer id and epoch, the state, the timeout, when the
transaction started and which partitions it has written to: the partitions a
stuck transaction holds back (their last stable offset cannot pass it).
"""

from __future__ import annotations

import argparse
import time

from odradek.cli.common import (
    add_connection_options,
    add_format_option,
    admin_client,
    failures_as_messages,
)

STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "transactions",
        help="list and describe transactional producers",
        description="Transactional ids known to the transaction coordinator, and the "
        "transaction each has open.",
    )
    sub = parser.add_subparsers(dest="transactions_command", metavar="ACTION")
    sub.required = True

    listing = sub.add_parser("list", help="transactional ids, their producer ids and states")
    listing.add_argument(
        "--state", action="append", choices=STATES, help="only these states (repeatable)"
    )
    listing.add_argument(
        "--producer-id", action="append", type=int, help="only these producer ids (repeatable)"
    )
    listing.add_argument(
        "--duration-ms",
        type=int,
        default=-1,
        metavar="MS",
        help="only transactions running longer than this",
    )
    add_format_option(listing)
    add_connection_options(listing)
    listing.set_defaults(run=run_list)

    describe = sub.add_parser("describe", help="one transactional id in detail")
    describe.add_argument("transactional_ids", nargs="+", metavar="TRANSACTIONAL_ID")
    add_format_option(describe)
    add_connection_options(describe)
    describe.set_defaults(run=run_describe)


def run_list(args: argparse.Namespace) -> int:
    from odradek.cli import render

    with admin_client(args) as admin, failures_as_messages("cannot list transactions"):
        listed = admin.list_transactions(
            states=args.state or (),
            producer_ids=args.producer_id or (),
            duration_ms=args.duration_ms,
        )
    if args.format == "json":
        render.print_json(
            [
                {
                    "transactional_id": t.transactional_id,
                    "producer_id": t.producer_id,
                    "state": t.state,
                }
                for t in listed
            ]
        )
        return 0
    out = render.output()
    if not listed:
        out.print("No transactional ids.")
        return 0
    table = render.table("TRANSACTIONAL ID", "PRODUCER ID", "STATE", numeric=("PRODUCER ID",))
    for t in listed:
        table.add_row(render.text(t.transactional_id), str(t.producer_id), t.state)
    out.print(table)
    return 0


def run_describe(args: argparse.Namespace) -> int:
    from odradek.cli import render

    with admin_client(args) as admin, failures_as_messages("cannot describe transactions"):
        described = admin.describe_transactions(args.transactional_ids)
    now_ms = int(time.time() * 1000)
    if args.format == "json":
        render.print_json(
            [
                {
                    "transactional_id": d.transactional_id,
                    "state": d.state,
                    "producer_id": d.producer_id,
                    "producer_epoch": d.producer_epoch,
                    "timeout_ms": d.timeout_ms,
                    "start_time_ms": d.start_time_ms,
                    "partitions": [f"{tp.topic}-{tp.partition}" for tp in d.partitions],
                }
                for d in described.values()
            ]
        )
        return 0
    table = render.table(
        "TRANSACTIONAL ID",
        "PRODUCER ID",
        "EPOCH",
        "STATE",
        "TIMEOUT MS",
        "RUNNING FOR",
        "PARTITIONS",
        numeric=("PRODUCER ID", "EPOCH", "TIMEOUT MS"),
    )
    for d in described.values():
        running = "-"
        if d.start_time_ms is not None and d.state == "Ongoing":
            running = f"{(now_ms - d.start_time_ms) / 1000:.1f}s"
        partitions = ", ".join(f"{tp.topic}-{tp.partition}" for tp in d.partitions) or "-"
        table.add_row(
            render.text(d.transactional_id),
            str(d.producer_id),
            str(d.producer_epoch),
            d.state,
            str(d.timeout_ms),
            running,
            render.text(partitions),
        )
    render.output().print(table)
    return 0
