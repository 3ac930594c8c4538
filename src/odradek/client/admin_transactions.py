"""The admin client's transaction calls (KIP-664): DescribeTransactions, ListTransactions.

``describe_transactions`` asks each transactional id's coordinator
(FindCoordinator, key type 1); ``list_transactions`` asks every broker, as
Kafka's admin client does, since each coordinates its own share of the ids.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from odradek.client.discovery import KEY_TYPE_TRANSACTION
from odradek.client.errors import make_error
from odradek.client.structs import TopicPartition
from odradek.protocol.apikeys import ApiKey


class TransactionDescription(NamedTuple):
    transactional_id: str
    state: str  # Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int | None  # None: no transaction has started
    partitions: tuple[TopicPartition, ...]


class TransactionListing(NamedTuple):
    transactional_id: str
    producer_id: int
    state: str


class TransactionAdminMixin:
    """Mixed into AdminClient: uses its ``_call``, ``_client`` and ``_timeout_s``."""

    _call: Callable[..., Any]
    _client: Any
    _timeout_s: Callable[[int | None], float]

    def _transaction_coordinator(self, transactional_id: str, timeout_s: float) -> int:
        def check(response: Any) -> int:
            entries = getattr(response, "coordinators", None)
            return int(entries[0].error_code if entries else response.error_code)

        response = self._call(
            self._any_node,  # type: ignore[attr-defined]
            ApiKey.FIND_COORDINATOR,
            {
                "key": transactional_id,
                "key_type": KEY_TYPE_TRANSACTION,
                "coordinator_keys": (transactional_id,),
            },
            timeout_s,
            check=check,
        )
        entries = getattr(response, "coordinators", None)
        node = int((entries[0] if entries else response).node_id)
        if node not in self._client.cluster.brokers:
            self._client.refresh(timeout_s=timeout_s)
        return node

    def describe_transactions(
        self, transactional_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, TransactionDescription]:
        """Each id's state, producer id and epoch, timeout, start and partitions; an
        unknown id raises TransactionalIdNotFoundError."""
        timeout_s = self._timeout_s(timeout_ms)
        out: dict[str, TransactionDescription] = {}
        for txn_id in dict.fromkeys(transactional_ids):
            node = self._transaction_coordinator(txn_id, timeout_s)
            response = self._call(
                functools.partial(int, node),
                ApiKey.DESCRIBE_TRANSACTIONS,
                {"transactional_ids": (txn_id,)},
                timeout_s,
            )
            state = response.transaction_states[0]
            code = int(state.error_code)
            if code:
                raise make_error(code, f"transactional id {txn_id!r}")
            start = round(state.transaction_start_time.timestamp() * 1000)
            out[txn_id] = TransactionDescription(
                txn_id,
                state.transaction_state,
                int(state.producer_id),
                int(state.producer_epoch),
                round(state.transaction_timeout.total_seconds() * 1000),
                start if start >= 0 else None,
                tuple(TopicPartition(t.topic, int(p)) for t in state.topics for p in t.partitions),
            )
        return out

    def list_transactions(
        self,
        *,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        duration_ms: int = -1,
        timeout_ms: int | None = None,
    ) -> list[TransactionListing]:
        """Transactional ids of every broker, sorted; filtered by state name, producer id
        and (brokers with ListTransactions v1+) transactions open longer than
        ``duration_ms``."""
        timeout_s = self._timeout_s(timeout_ms)
        cluster = self._client.refresh(timeout_s=timeout_s)
        found: dict[str, TransactionListing] = {}
        for node in sorted(cluster.brokers):
            response = self._call(
                functools.partial(int, node),
                ApiKey.LIST_TRANSACTIONS,
                {
                    "state_filters": tuple(states),
                    "producer_id_filters": tuple(producer_ids),
                    "duration_filter": duration_ms,
                },
                timeout_s,
                check=lambda r: int(r.error_code),
            )
            for t in response.transaction_states:
                found[t.transactional_id] = TransactionListing(
                    t.transactional_id, int(t.producer_id), t.transaction_state
                )
        return [found[k] for k in sorted(found)]
