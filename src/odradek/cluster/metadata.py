"""Cluster metadata on etcd: brokers, controller, topics, partition state, watches.

The values and events are in `odradek.replication.model`; this module is the store.

`EtcdMetadataStore` is a typed layer over the etcd v3 API (through the ``aetcd``
asyncio client). Every value is compact, key-sorted JSON; numbers in keys are
zero-padded to ten digits so etcd's byte-ordered range reads return them in numeric
order. With the default prefix ``/odradek/<cluster_name>`` the keys are::

    <p>/brokers/<broker id>              BrokerInfo {id, host, port, rack, pid}; on the
                                         broker's lease: gone when the lease ends
    <p>/controller                       ControllerInfo {broker_id, epoch}; on the
                                         controller's lease
    <p>/controller_epoch                 last controller epoch (decimal); no lease,
                                         so the epoch survives controller deaths and
                                         only ever grows
    <p>/topics/<name>                    TopicAssignment {topic_id, replicas:
                                         {partition: [broker ids]}, and while a
                                         partition is reassigned adding, removing:
                                         {partition: [broker ids]}}
    <p>/topic_configs/<name>             {config name: value}
    <p>/partitions/<name>/<partition>    PartitionState {leader, leader_epoch, isr,
                                         partition_epoch}

Rules the store enforces (each one a single etcd transaction):

* A broker id is registered by one live broker at a time (`BrokerIdInUseError`).
* The controller key is created only when absent, and in the same transaction
  ``controller_epoch`` goes from the value just read to that value + 1; two
  candidates racing for one epoch cannot both win, and a deposed controller's
  epoch is always lower than its successor's.
* A partition state changes only by compare-and-swap on the key's etcd
  ``mod_revision`` as the writer read it (`update_partition`); the new state's
  ``partition_epoch`` is the old one + 1. A writer that read an older state
  fails and gets the current state back in the same round trip. A controller
  passes its `ControllerClaim` so the write also fails once it is no longer the
  controller (its key was deleted or recreated by another broker).
* A topic is created with its configs and every partition's initial state, only
  if the name is free, atomically to readers (below: in one transaction, or in
  batches behind a claim when it has more partitions than one transaction takes).
* A topic's assignment (reassignment, added partitions) changes only by
  compare-and-swap on its key's ``mod_revision`` (`update_topic_assignment`),
  fenced by a `ControllerClaim` like partition states.

Any partition count (issue 21, item 3). etcd refuses a transaction with more than
``--max-txn-ops`` (default 128) compares, success or failure operations, so a
topic and all its partition states fit in one only up to 125 partitions. Larger
creations and growths (CreatePartitions) are written in batches that stay atomic
to readers, the topic key last as the commit point:

1. *Claim*: one transaction puts ``pending_topics/<name>`` (a fresh token, on a
   short lease of the writer's own, `PENDING_CLAIM_TTL_S`) if no claim exists and
   the topic key is absent (creation) or still at the revision the growth was
   decided on, and deletes the partition states past the topic's current
   partitions: leftovers of an attempt that died midway.
2. *States*: the partition states, `STATES_PER_BATCH` per transaction, each
   comparing that the claim still holds our token and the topic key is as in 1.
3. *Commit*: the topic key (with the configs, on creation) under the same
   compares, deleting the claim. The writer revokes its lease whatever happened.

Until the commit, the states written belong to partitions the topic does not
have (yet): `cluster` leaves out states of unknown topics and of partitions past
a topic's count, and a broker's watcher does the same (``ClusterNode`` applies a
state only to a partition of a topic it holds, and re-applies a topic's states
when its key arrives). An attempt that fails (the topic created or changed by
another writer, the claim's lease lost in a stall, a deposed controller) leaves
states nobody reads, removed by the next claim. A second writer of the same
topic meanwhile fails at its claim (creation: TopicExistsError; growth: the CAS
answer with the current assignment). A reassignment (no added partitions) is
not held up by a claim: it changes the topic's revision, so a growth in
progress fails at its next batch.

Watches (`watch_brokers`, `watch_controller`, `watch_topics`, `watch_partitions`,
and `watch_cluster` for everything in one stream) start at a revision, so a reader
takes a snapshot (`cluster`, or a per-kind read; each carries the etcd revision it
was read at) and watches from ``revision + 1``: no change is missed or seen twice,
and events arrive in etcd's revision order. The watches are async generators;
close them (``aclose()``) to cancel the etcd watch. A watch ends with
`MetadataWatchLost` when its stream breaks (etcd restarted, connection lost, the
start revision was compacted); the reader then takes a new snapshot.

Connection failures surface as ``aetcd.exceptions.ClientError`` subclasses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, Self, TypeVar

import aetcd
import aetcd.exceptions
import aetcd.rtypes
import aetcd.transactions
import aetcd.utils
import grpc
from aetcd import rpc as aetcd_rpc
from aetcd import watcher as aetcd_watcher

from odradek.cluster.etcd_tls import EtcdTls
from odradek.cluster.lease_deadline import LeaseDeadline
from odradek.replication.model import (
    SECURITY_DOCUMENTS,
    BrokerChange,
    BrokerIdInUseError,
    BrokerInfo,
    ChangeKind,
    ClusterMetadata,
    ControllerChange,
    ControllerClaim,
    ControllerInfo,
    LeaseLost,
    MetadataChange,
    MetadataError,
    MetadataWatchLost,
    NotControllerError,
    PartitionChange,
    PartitionState,
    PartitionUpdate,
    RegistrationLease,
    SecurityChange,
    Snapshot,
    TopicAssignment,
    TopicChange,
    TopicConfigChange,
    TopicExistsError,
    TopicUpdate,
    UnknownTopicError,
    VersionedPartitionState,
    VersionedTopicAssignment,
    decode_value,
    encode_value,
)

T = TypeVar("T")
WATCH_CANCEL_TIMEOUT_S = 2.0

log = logging.getLogger(__name__)

DEFAULT_CLUSTER_NAME = "default"
_NUMBER_WIDTH = 10

# etcd's default --max-txn-ops: a transaction's compares, its success operations and
# its failure operations may each number at most this many (etcd's checkTxnRequest).
ETCD_MAX_TXN_OPS = 128
# Partition states per transaction of a batched creation or growth (one operation
# left for the claim's range delete).
STATES_PER_BATCH = ETCD_MAX_TXN_OPS - 1
# The lease of a batched write's claim: a writer that dies midway frees the name
# after this long.
PENDING_CLAIM_TTL_S = 10

# ---------------------------------------------------------------------------
# Leases


class LeaseKeeper:
    """A granted etcd lease kept alive by a background task until revoked.

    The keeper refreshes `refresh_interval` apart, and every `RETRY_AFTER_FAILURE_S`
    while etcd does not answer; it acts on the lease only while `LeaseDeadline` says
    etcd cannot have expired it (the send time of the last keep-alive etcd granted
    plus the TTL, less a margin; moved on when every etcd member refuses connections,
    as no leader can expire a lease then: see `odradek.cluster.lease_deadline`). When
    a refresh finds the lease gone, or the deadline passes unrefreshed, `lost` is set
    and the task stops: the owner must treat every key on the lease (registration,
    controller role) as lost. `stop_keepalive` stops refreshing without revoking,
    which is what a crashed process looks like to etcd (the lease expires after the
    TTL). `on_recovered` is called when a refresh succeeds after failures (etcd was
    unreachable and is back).
    """

    def __init__(
        self,
        client: aetcd.Client,
        lease_id: int,
        ttl_s: int,
        *,
        granted_sent_at: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        all_members_down: Callable[[], Awaitable[bool]] | None = None,
        on_recovered: Callable[[], None] | None = None,
    ) -> None:
        self._client = client
        self.lease_id = lease_id
        self.ttl_s = ttl_s
        self._clock = clock
        self.deadline = LeaseDeadline.granted_at(
            clock() if granted_sent_at is None else granted_sent_at, ttl_s
        )
        self._all_members_down = all_members_down
        self.on_recovered = on_recovered
        self.lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = asyncio.get_running_loop().create_task(
            self._keep_alive(), name=f"etcd-lease-{lease_id:x}"
        )

    def alive(self) -> bool:
        """Whether the owner may still act on the lease (etcd cannot have expired it)."""
        return not self.lost.is_set() and self.deadline.alive(self._clock())

    async def _keep_alive(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(self.deadline.next_attempt_in(self._clock(), failing=failing))
            sent = self._clock()
            if not self.deadline.alive(sent):
                log.warning(
                    "lease %x: no keep-alive granted in time, etcd may have expired it",
                    self.lease_id,
                )
                self.lost.set()
                return
            try:
                # never wait past the deadline for one answer: a hung member must not
                # keep us from trying the next one
                async with asyncio.timeout(max(self.deadline.remaining(sent), 0.05)):
                    reply = await self._client.refresh_lease(self.lease_id)
            except (aetcd.exceptions.ClientError, TimeoutError) as exc:
                if not failing:
                    log.info("refreshing lease %x failed, retrying: %r", self.lease_id, exc)
                failing = True
                await self._note_outage()
                continue
            if reply is None or reply.TTL <= 0:
                log.warning("lease %x expired", self.lease_id)
                self.lost.set()
                return
            self.deadline.refreshed(sent, reply.TTL)
            if failing:
                failing = False
                log.info("lease %x refreshed again: etcd is back", self.lease_id)
                if self.on_recovered is not None:
                    self.on_recovered()

    async def _note_outage(self) -> None:
        """A refresh failed: if every etcd member refuses connections, no leader exists
        to expire the lease (`LeaseDeadline.no_leader_between`)."""
        if self._all_members_down is None:
            return
        start = self._clock()
        try:
            down = await self._all_members_down()
        except Exception:  # a probe that fails proves nothing
            return
        if down and self.deadline.no_leader_between(start, self._clock()):
            log.debug("lease %x: every etcd member down; deadline moved", self.lease_id)

    async def stop_keepalive(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def revoke(self) -> None:
        """Stop refreshing and end the lease now: its keys disappear at once."""
        await self.stop_keepalive()
        self.lost.set()
        await self._client.revoke_lease(self.lease_id)


# ---------------------------------------------------------------------------
# The store


@dataclass(frozen=True, slots=True)
class KeyLayout:
    """Where each kind of metadata lives under the cluster prefix."""

    prefix: bytes
    brokers: bytes = field(init=False)
    controller: bytes = field(init=False)
    controller_epoch: bytes = field(init=False)
    topics: bytes = field(init=False)
    topic_configs: bytes = field(init=False)
    partitions: bytes = field(init=False)
    producer_ids: bytes = field(init=False)
    security: bytes = field(init=False)
    pending_topics: bytes = field(init=False)

    def __post_init__(self) -> None:
        if not self.prefix.startswith(b"/") or self.prefix.endswith(b"/"):
            raise ValueError(f"prefix must start and not end with '/': {self.prefix!r}")
        p = self.prefix
        object.__setattr__(self, "brokers", p + b"/brokers/")
        object.__setattr__(self, "controller", p + b"/controller")
        object.__setattr__(self, "controller_epoch", p + b"/controller_epoch")
        object.__setattr__(self, "topics", p + b"/topics/")
        object.__setattr__(self, "topic_configs", p + b"/topic_configs/")
        object.__setattr__(self, "partitions", p + b"/partitions/")
        object.__setattr__(self, "producer_ids", p + b"/producer_id_block")
        object.__setattr__(self, "security", p + b"/security/")
        object.__setattr__(self, "pending_topics", p + b"/pending_topics/")

    @classmethod
    def for_cluster(cls, cluster_name: str) -> Self:
        if not cluster_name or "/" in cluster_name:
            raise ValueError(f"invalid cluster name {cluster_name!r}")
        return cls(prefix=b"/odradek/" + cluster_name.encode())

    def broker(self, broker_id: int) -> bytes:
        return self.brokers + _number(broker_id)

    def topic(self, name: str) -> bytes:
        return self.topics + name.encode()

    def topic_config(self, name: str) -> bytes:
        return self.topic_configs + name.encode()

    def pending_topic(self, name: str) -> bytes:
        return self.pending_topics + name.encode()

    def topic_partitions(self, name: str) -> bytes:
        return self.partitions + name.encode() + b"/"

    def partition(self, name: str, partition: int) -> bytes:
        return self.topic_partitions(name) + _number(partition)

    def parse_partition(self, key: bytes) -> tuple[str, int]:
        topic, _, partition = key[len(self.partitions) :].rpartition(b"/")
        return topic.decode(), int(partition)


def _number(n: int) -> bytes:
    if n < 0:
        raise ValueError(f"negative id {n}")
    return str(n).zfill(_NUMBER_WIDTH).encode()


def _is_lease_not_found(exc: aetcd.exceptions.ClientError) -> bool:
    cause = exc.__cause__
    return isinstance(cause, grpc.aio.AioRpcError) and cause.code() == grpc.StatusCode.NOT_FOUND


def _prefix_end(prefix: bytes) -> bytes:
    return aetcd.utils.prefix_range_end(prefix)


# gRPC reconnects to a member that went away with an exponential backoff of up to
# 120 s by default: etcd back after a few seconds would stay unused for far longer.
# (gRPC core takes min_reconnect_backoff_ms as the time one connection attempt may
# take, 20 s by default: 100 ms failed handshakes on a loaded machine.) Keepalive
# pings (while calls are open: the watch) notice a member that hangs instead of
# closing the connection, so the channel moves on; etcd refuses pings more often
# than every 5 s (--grpc-keepalive-min-time).
CHANNEL_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 3000,
    "grpc.max_reconnect_backoff_ms": 500,
    "grpc.keepalive_time_ms": 6000,
    "grpc.keepalive_timeout_ms": 2000,
}
MEMBER_PROBE_TIMEOUT_S = 0.5


def grpc_target(endpoints: Sequence[tuple[str, int]]) -> tuple[str, int]:
    """aetcd's (host, port) that makes gRPC's channel use every endpoint in turn.

    aetcd dials ``f"{host}:{port}"``; gRPC's ``ipv4:`` target takes a list of
    addresses and its default pick_first policy connects to the first that accepts,
    and, when that connection breaks, tries them again in order: client-side
    failover between etcd members, as etcd's own clients do with their endpoint
    list. The list needs IP addresses, so names are resolved once, here.
    """
    if not endpoints:
        raise ValueError("no etcd endpoint")
    if len(endpoints) == 1:
        return endpoints[0]
    addresses = [(socket.gethostbyname(host), port) for host, port in endpoints]
    *rest, (last_host, last_port) = addresses
    listed = "".join(f"{host}:{port}," for host, port in rest)
    return f"ipv4:{listed}{last_host}", last_port


class TlsEtcdClient(aetcd.Client):
    """aetcd's client over a TLS channel (etcd over TLS, `EtcdTls`).

    aetcd 1.0 takes no TLS arguments: its `connect` always opens an insecure channel
    (martyanov/aetcd#37 is open). This one opens ``grpc.aio.secure_channel`` instead and
    sets up the same stubs on it; everything else is aetcd's. No username/password
    authentication (Odradek never gives one: the client certificate authenticates).
    """

    def __init__(
        self, tls: EtcdTls, server_name: str | None, *, options: dict[str, Any], **client: Any
    ) -> None:
        if server_name is not None:
            # With several endpoints the target is an `ipv4:` address list, which names
            # no host: check every member's certificate against this name instead.
            options = {**options, "grpc.ssl_target_name_override": server_name}
        super().__init__(options=options, **client)
        self._credentials = tls.channel_credentials()

    async def connect(self) -> None:
        if self._connected.is_set():
            return
        target = f"{self._host}:{self._port}"
        self.channel = grpc.aio.secure_channel(
            target, self._credentials, options=list(self._options.items())
        )
        self.kvstub = aetcd_rpc.KVStub(self.channel)
        self.clusterstub = aetcd_rpc.ClusterStub(self.channel)
        self.leasestub = aetcd_rpc.LeaseStub(self.channel)
        self.maintenancestub = aetcd_rpc.MaintenanceStub(self.channel)
        self._watcher = aetcd_watcher.Watcher(
            aetcd_rpc.WatchStub(self.channel), timeout=self._timeout, metadata=self.metadata
        )
        self._connected.set()


async def refuses_connections(host: str, port: int) -> bool:
    """True if nothing listens at (host, port): the connection is refused (not merely
    unanswered, which a partition or a paused process looks like too)."""
    try:
        async with asyncio.timeout(MEMBER_PROBE_TIMEOUT_S):
            _, writer = await asyncio.open_connection(host, port)
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return False


class EtcdMetadataStore:
    """Typed access to one cluster's metadata in etcd. Use as an async context manager.

    `host` and `port` name one etcd member; `failover` more members of the same etcd
    cluster, used in turn when the one in use goes away (`grpc_target`). `tls`: reach
    them over TLS with these certificates (None: plaintext).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        cluster_name: str = DEFAULT_CLUSTER_NAME,
        request_timeout_s: int = 10,
        failover: Sequence[tuple[str, int]] = (),
        tls: EtcdTls | None = None,
    ) -> None:
        self.keys = KeyLayout.for_cluster(cluster_name)
        self.endpoints = [(host, port), *failover]
        self.tls = tls
        target_host, target_port = grpc_target(self.endpoints)
        options = {"host": target_host, "port": target_port, "timeout": request_timeout_s}
        if tls is None:
            self._client = aetcd.Client(**options, options=CHANNEL_OPTIONS)
        else:
            server_name = host if failover else None
            self._client = TlsEtcdClient(tls, server_name, **options, options=CHANNEL_OPTIONS)
        self._txn = aetcd.transactions
        self._leases: list[LeaseKeeper] = []
        self.on_recovered: Callable[[], None] | None = None  # given to every lease kept
        # Whether `endpoints` name every member etcd listed (`check_membership`): only
        # then does every endpoint refusing connections mean etcd has no leader.
        self.every_member_listed = False

    @classmethod
    def for_endpoints(cls, endpoints: Sequence[tuple[str, int]], **options: Any) -> Self:
        first, *rest = endpoints
        return cls(*first, failover=rest, **options)

    async def all_members_down(self) -> bool:
        """Whether every etcd member refuses connections right now (then no etcd leader
        exists: see `odradek.cluster.lease_deadline`). False unless the endpoints are
        known to name every member: a member left out may be leading."""
        if not self.every_member_listed:
            return False
        probes = [refuses_connections(host, port) for host, port in self.endpoints]
        return all(await asyncio.gather(*probes))

    async def check_membership(self) -> list[str]:
        """The etcd members none of `endpoints` names (by client URL), and whether there
        are none (`every_member_listed`)."""
        listed = {(socket.gethostbyname(host), port) for host, port in self.endpoints}
        unlisted = []
        async for member in self._client.members():
            addresses = set()
            for url in member.client_urls:
                host, port = url.split("://")[-1].rstrip("/").rsplit(":", 1)
                addresses.add((socket.gethostbyname(host.strip("[]")), int(port)))
            if not addresses & listed:
                unlisted.append(member.name or f"{member.id:x}")
        self.every_member_listed = not unlisted
        return unlisted

    async def __aenter__(self) -> Self:
        await self._client.connect()
        # Best effort: etcd may be down right now (the first use says so); raw gRPC errors
        # too, as aetcd's members() does not translate them.
        with contextlib.suppress(Exception):
            unlisted = await self.check_membership()
            if unlisted:
                log.warning(
                    "etcd members %s are not among the endpoints given: a broker cannot tell "
                    "a whole-etcd outage from being cut off, and keeps its roles only a TTL",
                    ", ".join(unlisted),
                )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop refreshing this store's leases (not revoke: they expire) and disconnect.

        A broker shutting down cleanly revokes its lease first so that others see it
        leave at once instead of after the TTL.
        """
        for lease in self._leases:
            await lease.stop_keepalive()
        self._leases.clear()
        await self._client.close()

    # -- leases ------------------------------------------------------------

    async def grant_lease(self, ttl_s: int) -> LeaseKeeper:
        """A new lease of `ttl_s` seconds (etcd's minimum is a few seconds), kept alive."""
        if ttl_s < 1:
            raise ValueError(f"lease TTL must be >= 1 s, got {ttl_s}")
        sent = time.monotonic()
        lease = await self._client.lease(ttl_s)
        keeper = LeaseKeeper(
            self._client,
            lease.id,
            lease.ttl,
            granted_sent_at=sent,
            all_members_down=self.all_members_down,
            on_recovered=self.on_recovered,
        )
        self._leases.append(keeper)
        return keeper

    # -- brokers -----------------------------------------------------------

    async def register_broker(
        self, broker: BrokerInfo, lease: LeaseKeeper, *, replacing: int | None = None
    ) -> int:
        """Publish `broker` on `lease`; the etcd revision of the registration.

        Raises `BrokerIdInUseError` if the id is registered on another lease (a
        live broker with the same id), `LeaseLost` if `lease` has ended.
        Re-registering on the same lease updates host/port/rack. `replacing` is the
        lease of this same process's earlier registration (given up when its keeper
        could no longer vouch for it): a registration still on it moves to `lease` in
        one compare-and-swap, so nobody ever sees the broker leave. Only the process
        that was granted a lease knows its id, so another process with the same
        broker id is still refused.
        """
        key = self.keys.broker(broker.broker_id)
        publish = [self._txn.Put(key, broker.encode(), lease=lease.lease_id), self._txn.Get(key)]
        while True:
            succeeded, responses = await self._transaction_on_lease(
                lease, [self._txn.Create(key) == 0], publish, [self._txn.Get(key)]
            )
            if succeeded:
                [(_, created)] = responses[1]
                return int(created.mod_revision)
            if not responses[0]:
                continue  # the holder's lease ended between compare and read: retry
            [(_, existing)] = responses[0]
            if existing.lease not in (lease.lease_id, replacing):
                raise BrokerIdInUseError(
                    f"broker id {broker.broker_id} is registered by another live broker: "
                    f"{BrokerInfo.decode(existing.value)}"
                )
            # ours (this lease's, or the one it replaces): update it unless it changed
            succeeded, responses = await self._transaction_on_lease(
                lease, [self._txn.Mod(key) == existing.mod_revision], publish, []
            )
            if succeeded:
                [(_, updated)] = responses[1]
                return int(updated.mod_revision)

    async def revoke_lease(self, lease_id: int) -> None:
        """End a lease this process no longer keeps (already gone: nothing to do)."""
        try:
            await self._client.revoke_lease(lease_id)
        except aetcd.exceptions.ClientError as exc:
            if not _is_lease_not_found(exc):
                raise

    async def brokers(self) -> Snapshot[dict[int, BrokerInfo]]:
        """Every live broker, by id."""
        result = await self._client.get_prefix(self.keys.brokers)
        live = {}
        for kv in result:
            broker = BrokerInfo.decode(kv.value)
            live[broker.broker_id] = broker
        return Snapshot(live, result.header.revision)

    async def registration_leases(self) -> dict[int, RegistrationLease]:
        """The lease under each broker's registration, by broker id: how long a broker
        that died without leaving still shows as registered."""
        result = await self._client.get_prefix(self.keys.brokers)
        leases = {}
        for kv in result:
            lease = await self._registration_lease(kv)
            if lease is not None:
                leases[lease.broker_id] = lease
        return leases

    async def registration_lease(self, broker_id: int) -> RegistrationLease | None:
        """The lease under one broker's registration (None: not registered)."""
        kv, _ = await self._get_one(self.keys.broker(broker_id))
        return None if kv is None else await self._registration_lease(kv)

    async def _registration_lease(self, kv: aetcd.rtypes.KeyValue) -> RegistrationLease | None:
        broker_id = BrokerInfo.decode(kv.value).broker_id
        info = await self._client.get_lease_info(kv.lease, keys=False)
        if info.TTL < 0:  # it ended between the two reads
            return None
        return RegistrationLease(broker_id, int(info.grantedTTL), int(info.TTL), int(kv.lease))

    async def watch_brokers(self, start_revision: int) -> AsyncGenerator[BrokerChange, None]:
        """Registrations and departures from `start_revision` on, in order."""
        async for change in self._watch(self.keys.brokers, start_revision):
            assert isinstance(change, BrokerChange)
            yield change

    # -- controller --------------------------------------------------------

    async def controller(self) -> Snapshot[ControllerInfo | None]:
        kv, revision = await self._get_one(self.keys.controller)
        return Snapshot(None if kv is None else ControllerInfo.decode(kv.value), revision)

    async def controller_epoch(self) -> int:
        """The last epoch any controller was elected in (0 before the first)."""
        got = await self._client.get(self.keys.controller_epoch)
        return 0 if got is None else int(got.value)

    async def try_become_controller(
        self, broker_id: int, lease: LeaseKeeper
    ) -> ControllerClaim | ControllerInfo:
        """One election attempt: our claim if we won, else the sitting controller.

        A retry is needed only if the epoch moved between read and write (another
        candidate won and already lost its lease); the loop resolves that. Raises
        `LeaseLost` if `lease` has ended.
        """
        while True:
            current_epoch = await self.controller_epoch()
            epoch_unchanged = (
                self._txn.Version(self.keys.controller_epoch) == 0
                if current_epoch == 0
                else self._txn.Value(self.keys.controller_epoch) == str(current_epoch)
            )
            info = ControllerInfo(broker_id=broker_id, epoch=current_epoch + 1)
            succeeded, responses = await self._transaction_on_lease(
                lease,
                [self._txn.Create(self.keys.controller) == 0, epoch_unchanged],
                [
                    self._txn.Put(self.keys.controller, info.encode(), lease=lease.lease_id),
                    self._txn.Put(self.keys.controller_epoch, str(info.epoch).encode()),
                    self._txn.Get(self.keys.controller),
                ],
                [self._txn.Get(self.keys.controller)],
            )
            if succeeded:
                [(_, created)] = responses[2]
                return ControllerClaim(info=info, create_revision=created.create_revision)
            if responses[0]:
                [(value, _)] = responses[0]
                return ControllerInfo.decode(value)
            # no controller, but the epoch moved under us: read it again

    async def resign_controller(self, claim: ControllerClaim) -> bool:
        """Give up the role (delete the key if it is still ours)."""
        succeeded, _ = await self._client.transaction(
            compare=[self._txn.Create(self.keys.controller) == claim.create_revision],
            success=[self._txn.Delete(self.keys.controller)],
            failure=[],
        )
        return bool(succeeded)

    async def watch_controller(self, start_revision: int) -> AsyncGenerator[ControllerChange, None]:
        """Controller elections and departures from `start_revision` on, in order."""
        async for change in self._watch(self.keys.controller, start_revision, exact=True):
            assert isinstance(change, ControllerChange)
            yield change

    # -- topics ------------------------------------------------------------

    async def create_topic(
        self,
        assignment: TopicAssignment,
        configs: Mapping[str, str] | None = None,
        initial_states: Mapping[int, PartitionState] | None = None,
        *,
        controller: ControllerClaim | None = None,
    ) -> int:
        """Create a topic, its configs and partition states atomically; the revision.

        Without `initial_states`, each partition starts led by its first replica
        with every replica in the ISR at leader epoch 0 (what a controller does when
        all assigned replicas are live). Raises `TopicExistsError` if the name is
        taken (or another writer is creating it in batches), `NotControllerError`
        if `controller` no longer holds the role. More partitions than one etcd
        transaction takes are written in batches behind a claim (module doc).
        """
        name = assignment.name
        states = (
            dict(initial_states)
            if initial_states is not None
            else {p: PartitionState(r[0], 0, r) for p, r in assignment.replicas.items()}
        )
        if set(states) != set(assignment.replicas):
            raise ValueError(f"initial states must cover exactly the partitions of {name!r}")
        if len(states) + 3 > ETCD_MAX_TXN_OPS:  # + topic, configs, read-back
            return await self._create_in_batches(assignment, configs, states, controller)
        ops = [
            self._txn.Put(self.keys.topic(name), assignment.encode()),
            self._txn.Put(self.keys.topic_config(name), encode_value(dict(configs or {}))),
        ]
        ops += [
            self._txn.Put(self.keys.partition(name, p), state.encode())
            for p, state in sorted(states.items())
        ]
        compare = [self._txn.Create(self.keys.topic(name)) == 0, *self._fence(controller)]
        ops.append(self._txn.Get(self.keys.topic(name)))
        succeeded, responses = await self._client.transaction(
            compare=compare, success=ops, failure=[]
        )
        if not succeeded:
            await self._raise_if_deposed(controller)
            raise TopicExistsError(f"topic {name!r} already exists")
        [(_, created)] = responses[-1]
        return int(created.mod_revision)

    async def delete_topic(self, name: str, *, controller: ControllerClaim | None = None) -> None:
        """Remove a topic, its configs and partition states atomically."""
        partitions = self.keys.topic_partitions(name)
        succeeded, _ = await self._client.transaction(
            compare=[self._txn.Create(self.keys.topic(name)) > 0, *self._fence(controller)],
            success=[
                self._txn.Delete(self.keys.topic(name)),
                self._txn.Delete(self.keys.topic_config(name)),
                self._txn.Delete(partitions, range_end=_prefix_end(partitions)),
            ],
            failure=[],
        )
        if not succeeded:
            await self._raise_if_deposed(controller)
            raise UnknownTopicError(f"unknown topic {name!r}")

    async def topics(self) -> Snapshot[dict[str, TopicAssignment]]:
        result = await self._client.get_prefix(self.keys.topics)
        topics = {}
        for kv in result:
            name = kv.key[len(self.keys.topics) :].decode()
            topics[name] = TopicAssignment.decode(name, kv.value)
        return Snapshot(topics, result.header.revision)

    async def topic(self, name: str) -> VersionedTopicAssignment:
        """One topic's assignment and the revision `update_topic_assignment` compares."""
        got = await self._client.get(self.keys.topic(name))
        if got is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        return VersionedTopicAssignment(TopicAssignment.decode(name, got.value), got.mod_revision)

    async def update_topic_assignment(
        self,
        assignment: TopicAssignment,
        *,
        expected_revision: int,
        controller: ControllerClaim | None = None,
        added_partition_states: Mapping[int, PartitionState] | None = None,
    ) -> TopicUpdate:
        """Compare-and-swap a topic's assignment (reassignment, added partitions).

        Succeeds only if the topic key's ``mod_revision`` is still
        `expected_revision` (from `topic`, `cluster`'s ``topic_revisions`` or a
        `TopicChange`) and, with `controller`, while that claim holds the role.
        `added_partition_states` creates the state keys of partitions the new
        assignment adds (CreatePartitions) in the same transaction. On failure
        `TopicUpdate.current` is what is stored now (None if the topic is gone) so
        the caller decides again without another read. Raises
        `NotControllerError` if `controller` no longer holds the role. More added
        partitions than one etcd transaction takes are written in batches behind a
        claim (module doc); another writer's claim fails the update as a change would.
        """
        name = assignment.name
        added = dict(added_partition_states or {})
        if not set(added) <= set(assignment.replicas):
            raise ValueError(f"added partition states name partitions {name!r} does not have")
        if len(added) + 3 > ETCD_MAX_TXN_OPS:  # + topic, read-backs
            return await self._grow_in_batches(assignment, expected_revision, added, controller)
        key = self.keys.topic(name)
        writes = [self._txn.Put(key, assignment.encode())]
        writes += [
            self._txn.Put(self.keys.partition(name, p), state.encode())
            for p, state in sorted(added.items())
        ]
        succeeded, stored_now = await self._compare_and_swap(
            key, expected_revision, writes, controller
        )
        if stored_now is None:
            return TopicUpdate(False, None)
        value, kv = stored_now
        stored = TopicAssignment.decode(name, value)
        return TopicUpdate(succeeded, VersionedTopicAssignment(stored, kv.mod_revision))

    async def watch_topics(self, start_revision: int) -> AsyncGenerator[TopicChange, None]:
        """Topic creations (PUT with the assignment) and deletions from `start_revision` on."""
        async for change in self._watch(self.keys.topics, start_revision):
            assert isinstance(change, TopicChange)
            yield change

    async def topic_configs(self, name: str) -> dict[str, str]:
        got = await self._client.get(self.keys.topic_config(name))
        if got is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        return {str(k): str(v) for k, v in decode_value(got.value).items()}

    async def set_topic_configs(
        self, name: str, configs: Mapping[str, str], *, controller: ControllerClaim | None = None
    ) -> None:
        """Replace a topic's configs (the topic must exist)."""
        succeeded, _ = await self._client.transaction(
            compare=[self._txn.Create(self.keys.topic(name)) > 0, *self._fence(controller)],
            success=[self._txn.Put(self.keys.topic_config(name), encode_value(dict(configs)))],
            failure=[],
        )
        if not succeeded:
            await self._raise_if_deposed(controller)
            raise UnknownTopicError(f"unknown topic {name!r}")

    # -- partition state -----------------------------------------------------

    async def partition(self, topic: str, partition: int) -> VersionedPartitionState:
        got = await self._client.get(self.keys.partition(topic, partition))
        if got is None:
            raise UnknownTopicError(f"unknown partition {topic}-{partition}")
        return VersionedPartitionState(
            topic, partition, PartitionState.decode(got.value), got.mod_revision
        )

    async def partitions(
        self, topic: str | None = None
    ) -> Snapshot[dict[tuple[str, int], VersionedPartitionState]]:
        """Every partition's state (of one topic, or of all topics) as stored: while a
        batched creation or growth runs, also states of partitions the topic does not
        have yet (`cluster` leaves those out)."""
        prefix = self.keys.partitions if topic is None else self.keys.topic_partitions(topic)
        result = await self._client.get_prefix(prefix)
        states = {}
        for kv in result:
            name, number = self.keys.parse_partition(kv.key)
            states[name, number] = VersionedPartitionState(
                name, number, PartitionState.decode(kv.value), kv.mod_revision
            )
        return Snapshot(states, result.header.revision)

    async def update_partition(
        self,
        current: VersionedPartitionState,
        *,
        leader: int,
        leader_epoch: int,
        isr: Sequence[int],
        controller: ControllerClaim | None = None,
    ) -> PartitionUpdate:
        """Compare-and-swap a partition's state against `current` as read.

        Succeeds only if nobody changed the partition since `current` was read (and,
        with `controller`, only while that claim still holds the role). The stored
        ``partition_epoch`` becomes ``current.state.partition_epoch + 1``. On
        failure `PartitionUpdate.current` is the state now stored (None if the
        topic was deleted) so the caller can decide again without another read.
        Raises `NotControllerError` if `controller` was given and no longer holds
        the role (whether or not the partition also changed). Leader epochs must not
        go backwards (ValueError).
        """
        if leader_epoch < current.state.leader_epoch:
            raise ValueError(
                f"leader epoch of {current.topic}-{current.partition} would go back from "
                f"{current.state.leader_epoch} to {leader_epoch}"
            )
        new = PartitionState(
            leader=leader,
            leader_epoch=leader_epoch,
            isr=tuple(isr),
            partition_epoch=current.state.partition_epoch + 1,
        )
        key = self.keys.partition(current.topic, current.partition)
        succeeded, stored_now = await self._compare_and_swap(
            key, current.mod_revision, [self._txn.Put(key, new.encode())], controller
        )
        if stored_now is None:
            return PartitionUpdate(succeeded, None)
        value, kv = stored_now
        now = VersionedPartitionState(
            current.topic, current.partition, PartitionState.decode(value), kv.mod_revision
        )
        return PartitionUpdate(succeeded, now)

    async def watch_partitions(
        self, start_revision: int, topic: str | None = None
    ) -> AsyncGenerator[PartitionChange, None]:
        """Partition state changes (of one topic, or all) from `start_revision` on."""
        prefix = self.keys.partitions if topic is None else self.keys.topic_partitions(topic)
        async for change in self._watch(prefix, start_revision):
            assert isinstance(change, PartitionChange)
            yield change

    async def watch_cluster(self, start_revision: int) -> AsyncGenerator[MetadataChange, None]:
        """Every change under the cluster prefix, in one stream in etcd's order.

        Follows a `cluster` snapshot: the per-kind watches are ordered within their
        kind only; this one orders, say, a broker's registration before a partition
        state naming it as leader. (``controller_epoch`` changes are folded into the
        `ControllerChange` that carries the epoch, so they are not reported.)
        """
        async for change in self._watch(self.keys.prefix + b"/", start_revision):
            yield change

    # -- batched creation and growth (module doc: "Any partition count") -------

    async def _create_in_batches(
        self,
        assignment: TopicAssignment,
        configs: Mapping[str, str] | None,
        states: Mapping[int, PartitionState],
        controller: ControllerClaim | None,
    ) -> int:
        name = assignment.name
        topic_key = self.keys.topic(name)
        topic_absent = self._txn.Create(topic_key) == 0
        async with self._claim(name, topic_absent, 0, controller) as holds:
            if holds is None:
                await self._raise_if_deposed(controller)
                raise TopicExistsError(f"topic {name!r} already exists or is being created")
            if not await self._put_states_in_batches(
                name, states, [topic_absent, holds, *self._fence(controller)]
            ):
                await self._creation_failed(name, controller)
            succeeded, responses = await self._client.transaction(
                compare=[topic_absent, holds, *self._fence(controller)],
                success=[
                    self._txn.Put(topic_key, assignment.encode()),
                    self._txn.Put(self.keys.topic_config(name), encode_value(dict(configs or {}))),
                    self._txn.Delete(self.keys.pending_topic(name)),
                    self._txn.Get(topic_key),
                ],
                failure=[],
            )
            if not succeeded:
                await self._creation_failed(name, controller)
            [(_, created)] = responses[-1]
            return int(created.mod_revision)

    async def _creation_failed(self, name: str, controller: ControllerClaim | None) -> NoReturn:
        """Why a batched creation's compare failed: the controller deposed, the topic
        created by another writer, or our claim lost (its lease ended in a stall)."""
        await self._raise_if_deposed(controller)
        if await self._client.get(self.keys.topic(name)) is not None:
            raise TopicExistsError(f"topic {name!r} was created meanwhile")
        raise MetadataError(f"creating topic {name!r} lost its claim midway; try again")

    async def _grow_in_batches(
        self,
        assignment: TopicAssignment,
        expected_revision: int,
        added: Mapping[int, PartitionState],
        controller: ControllerClaim | None,
    ) -> TopicUpdate:
        name = assignment.name
        first_added = min(added)
        if sorted(added) != list(range(first_added, len(assignment.replicas))):
            # the claim removes every state from the first added partition on
            raise ValueError(f"added partitions of {name!r} must be the last ones")
        topic_key = self.keys.topic(name)
        unchanged = self._txn.Mod(topic_key) == expected_revision
        async with self._claim(name, unchanged, first_added, controller) as holds:
            if holds is not None and await self._put_states_in_batches(
                name, added, [unchanged, holds, *self._fence(controller)]
            ):
                succeeded, stored_now = await self._compare_and_swap(
                    topic_key,
                    expected_revision,
                    [
                        self._txn.Put(topic_key, assignment.encode()),
                        self._txn.Delete(self.keys.pending_topic(name)),
                    ],
                    controller,
                    also=[holds],
                )
                if stored_now is not None:
                    value, kv = stored_now
                    stored = TopicAssignment.decode(name, value)
                    return TopicUpdate(succeeded, VersionedTopicAssignment(stored, kv.mod_revision))
                return TopicUpdate(False, None)
        await self._raise_if_deposed(controller)
        try:
            return TopicUpdate(False, await self.topic(name))
        except UnknownTopicError:
            return TopicUpdate(False, None)

    @contextlib.asynccontextmanager
    async def _claim(
        self,
        name: str,
        topic_as_decided: aetcd.transactions.BaseCompare,
        first_new_partition: int,
        controller: ControllerClaim | None,
    ) -> AsyncGenerator[aetcd.transactions.BaseCompare | None, None]:
        """Claim `name` for a batched write while the topic key is as decided, removing
        states from `first_new_partition` on (a failed attempt's); yields the compare
        that the claim is still ours, or None if the claim failed. The claim's lease is
        revoked on the way out (a crash lets it expire)."""
        claim_key = self.keys.pending_topic(name)
        token = encode_value({"token": str(uuid.uuid4())})
        sent = time.monotonic()
        lease = await self._client.lease(PENDING_CLAIM_TTL_S)
        keeper = LeaseKeeper(self._client, lease.id, lease.ttl, granted_sent_at=sent)
        stale_from = self.keys.partition(name, first_new_partition)
        try:
            succeeded, _ = await self._client.transaction(
                compare=[
                    topic_as_decided,
                    self._txn.Create(claim_key) == 0,
                    *self._fence(controller),
                ],
                success=[
                    self._txn.Put(claim_key, token, lease=keeper.lease_id),
                    self._txn.Delete(
                        stale_from, range_end=_prefix_end(self.keys.topic_partitions(name))
                    ),
                ],
                failure=[],
            )
            yield (self._txn.Value(claim_key) == token) if succeeded else None
        finally:
            with contextlib.suppress(aetcd.exceptions.ClientError):
                await keeper.revoke()
            await keeper.stop_keepalive()

    async def _put_states_in_batches(
        self,
        name: str,
        states: Mapping[int, PartitionState],
        compare: list[aetcd.transactions.BaseCompare],
    ) -> bool:
        """Write `states` `STATES_PER_BATCH` at a time while `compare` holds; False once
        it does not (the rest is not written)."""
        ordered = sorted(states.items())
        for start in range(0, len(ordered), STATES_PER_BATCH):
            batch = ordered[start : start + STATES_PER_BATCH]
            succeeded, _ = await self._client.transaction(
                compare=compare,
                success=[
                    self._txn.Put(self.keys.partition(name, p), state.encode())
                    for p, state in batch
                ],
                failure=[],
            )
            if not succeeded:
                return False
        return True

    # -- security documents (ACLs, SCRAM credentials) -------------------------

    async def update_security(
        self,
        name: str,
        change: Callable[[dict[str, Any] | None], dict[str, Any]],
    ) -> int:
        """Read-modify-write one security document by compare-and-swap; the revision.

        `change` gets the stored document (None if never written) and returns the
        new one; it is called again with the newer document whenever another
        broker wrote in between, so concurrent changes from different brokers
        compose instead of overwriting each other.
        """
        if name not in SECURITY_DOCUMENTS:
            raise ValueError(f"unknown security document {name!r}")

        def edit(raw: bytes | None) -> tuple[bytes, None]:
            return encode_value(change(None if raw is None else decode_value(raw))), None

        revision, _ = await self._read_modify_write(self.keys.security + name.encode(), edit)
        return revision

    async def _read_modify_write(
        self, key: bytes, edit: Callable[[bytes | None], tuple[bytes, T]]
    ) -> tuple[int, T]:
        """Replace `key`'s value with ``edit(value)[0]`` by compare-and-swap, reading
        and editing again while another writer got in between; the revision written
        and ``edit``'s second item."""
        while True:
            got = await self._client.get(key)
            value, outcome = edit(None if got is None else got.value)
            unchanged = (
                self._txn.Version(key) == 0
                if got is None
                else self._txn.Mod(key) == got.mod_revision
            )
            succeeded, responses = await self._client.transaction(
                compare=[unchanged],
                success=[self._txn.Put(key, value), self._txn.Get(key)],
                failure=[],
            )
            if succeeded:
                [(_, written)] = responses[1]
                return int(written.mod_revision), outcome

    # -- producer ids ----------------------------------------------------------

    async def allocate_producer_ids(self, count: int) -> int:
        """Reserve `count` producer ids for the caller alone; the first of them.

        A counter moved by compare-and-swap (Kafka's producer-id blocks): ids are
        never handed out twice, by any broker, across restarts.
        """
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")

        def reserve(raw: bytes | None) -> tuple[bytes, int]:
            first = 0 if raw is None else int(raw)
            return str(first + count).encode(), first

        _, first = await self._read_modify_write(self.keys.producer_ids, reserve)
        return first

    # -- everything at once ---------------------------------------------------

    async def cluster(self) -> Snapshot[ClusterMetadata]:
        """The whole cluster's metadata in one read, consistent at one revision.

        What a broker loads at start-up (or after `MetadataWatchLost`) before it
        follows the per-kind watches from ``revision + 1``.
        """
        result = await self._client.get_prefix(self.keys.prefix + b"/")
        keys = self.keys
        brokers: dict[int, BrokerInfo] = {}
        controller: ControllerInfo | None = None
        controller_epoch = 0
        topics: dict[str, TopicAssignment] = {}
        topic_revisions: dict[str, int] = {}
        configs: dict[str, dict[str, str]] = {}
        partitions: dict[tuple[str, int], VersionedPartitionState] = {}
        security: dict[str, dict[str, Any]] = {}
        for kv in result:
            key = kv.key
            if key.startswith(keys.brokers):
                broker = BrokerInfo.decode(kv.value)
                brokers[broker.broker_id] = broker
            elif key == keys.controller:
                controller = ControllerInfo.decode(kv.value)
            elif key == keys.controller_epoch:
                controller_epoch = int(kv.value)
            elif key.startswith(keys.topics):
                name = key[len(keys.topics) :].decode()
                topics[name] = TopicAssignment.decode(name, kv.value)
                topic_revisions[name] = int(kv.mod_revision)
            elif key.startswith(keys.topic_configs):
                name = key[len(keys.topic_configs) :].decode()
                configs[name] = {str(k): str(v) for k, v in decode_value(kv.value).items()}
            elif key == keys.producer_ids or key.startswith(keys.pending_topics):
                pass  # read by allocate_producer_ids / batched topic writes only
            elif key.startswith(keys.security):
                security[key[len(keys.security) :].decode()] = decode_value(kv.value)
            elif key.startswith(keys.partitions):
                topic, number = keys.parse_partition(key)
                partitions[topic, number] = VersionedPartitionState(
                    topic, number, PartitionState.decode(kv.value), kv.mod_revision
                )
            else:
                log.warning("ignoring unknown metadata key %r", key)
        # a batched creation or growth in progress: its states are not the topic's yet
        partitions = {
            key: state
            for key, state in partitions.items()
            if key[0] in topics and key[1] in topics[key[0]].replicas
        }
        metadata = ClusterMetadata(
            brokers,
            controller,
            controller_epoch,
            topics,
            configs,
            partitions,
            topic_revisions,
            security,
        )
        return Snapshot(metadata, int(result.header.revision))

    # -- helpers -----------------------------------------------------------

    async def _transaction_on_lease(
        self,
        lease: LeaseKeeper,
        compare: list[aetcd.transactions.BaseCompare],
        success: list[Any],
        failure: list[Any],
    ) -> tuple[bool, list[Any]]:
        """A transaction that attaches keys to `lease`: `LeaseLost` if etcd has none."""
        try:
            succeeded, responses = await self._client.transaction(
                compare=compare, success=success, failure=failure
            )
        except aetcd.exceptions.ClientError as exc:
            if _is_lease_not_found(exc):
                lease.lost.set()
                raise LeaseLost(f"lease {lease.lease_id:x} is gone") from exc
            raise
        return bool(succeeded), responses

    async def _compare_and_swap(
        self,
        key: bytes,
        expected_revision: int,
        writes: list[Any],
        controller: ControllerClaim | None,
        *,
        also: Sequence[aetcd.transactions.BaseCompare] = (),
    ) -> tuple[bool, tuple[bytes, Any] | None]:
        """`writes` if `key` is still at `expected_revision` (and `controller` still holds
        the role, and the compares in `also` hold): (succeeded, (value, kv) of `key` as
        stored now, None if it is gone). Raises `NotControllerError` when the claim
        failed, whatever the key did."""
        read_back = [self._txn.Get(key)]
        if controller is not None:
            read_back.append(self._txn.Get(self.keys.controller))
        succeeded, responses = await self._client.transaction(
            compare=[self._txn.Mod(key) == expected_revision, *self._fence(controller), *also],
            success=[*writes, *read_back],
            failure=read_back,
        )
        responses = responses[-len(read_back) :]
        if controller is not None and not succeeded:
            holder = responses[1]
            if not holder or holder[0][1].create_revision != controller.create_revision:
                raise NotControllerError(
                    f"broker {controller.info.broker_id} is no longer controller "
                    f"(epoch {controller.info.epoch})"
                )
        return bool(succeeded), (responses[0][0] if responses[0] else None)

    def _fence(self, claim: ControllerClaim | None) -> list[aetcd.transactions.BaseCompare]:
        if claim is None:
            return []
        return [self._txn.Create(self.keys.controller) == claim.create_revision]

    async def _raise_if_deposed(self, claim: ControllerClaim | None) -> None:
        if claim is None:
            return
        got = await self._client.get(self.keys.controller)
        if got is None or got.create_revision != claim.create_revision:
            raise NotControllerError(
                f"broker {claim.info.broker_id} is no longer controller (epoch {claim.info.epoch})"
            )

    async def _get_one(self, key: bytes) -> tuple[aetcd.rtypes.KeyValue | None, int]:
        """One key (None if absent) and the revision it was read at."""
        result = await self._client.get_range(key, key + b"\0")
        return (result[0] if result else None), int(result.header.revision)

    async def _watch(
        self, key: bytes, start_revision: int, *, exact: bool = False
    ) -> AsyncGenerator[MetadataChange, None]:
        if start_revision < 1:
            raise ValueError(f"start revision must be >= 1, got {start_revision}")
        range_end = None if exact else _prefix_end(key)
        try:
            watch = await self._client.watch(
                key, range_end=range_end, start_revision=start_revision
            )
        except aetcd.exceptions.ClientError as exc:
            raise MetadataWatchLost(f"watch on {key!r} could not start: {exc!r}") from exc
        try:
            async for event in watch:
                change = self._change(event)
                if change is not None:
                    yield change
        except aetcd.exceptions.ClientError as exc:
            raise MetadataWatchLost(f"watch on {key!r} ended: {exc!r}") from exc
        finally:
            # Bounded: a broker shutting down must not hang on an etcd that is slow
            # or already gone to hear that it no longer watches.
            with contextlib.suppress(aetcd.exceptions.ClientError, TimeoutError):
                async with asyncio.timeout(WATCH_CANCEL_TIMEOUT_S):
                    await watch.cancel()
        raise MetadataWatchLost(f"watch on {key!r} ended")

    def _change(self, event: aetcd.rtypes.Event) -> MetadataChange | None:
        """The typed change one etcd event stands for (None for the epoch counter)."""
        keys, key, kv = self.keys, event.kv.key, event.kv
        put = event.kind == "PUT"
        kind = ChangeKind.PUT if put else ChangeKind.DELETE
        if key.startswith(keys.brokers):
            broker_id = int(key[len(keys.brokers) :])
            return BrokerChange(
                kind, broker_id, BrokerInfo.decode(kv.value) if put else None, kv.mod_revision
            )
        if key == keys.controller:
            info = ControllerInfo.decode(kv.value) if put else None
            return ControllerChange(kind, info, kv.mod_revision)
        if key in (keys.controller_epoch, keys.producer_ids) or key.startswith(keys.pending_topics):
            return None
        if key.startswith(keys.security):
            document = decode_value(kv.value) if put else None
            return SecurityChange(
                kind, key[len(keys.security) :].decode(), document, kv.mod_revision
            )
        if key.startswith(keys.topics):
            name = key[len(keys.topics) :].decode()
            assignment = TopicAssignment.decode(name, kv.value) if put else None
            return TopicChange(kind, name, assignment, kv.mod_revision)
        if key.startswith(keys.topic_configs):
            name = key[len(keys.topic_configs) :].decode()
            configs = {str(k): str(v) for k, v in decode_value(kv.value).items()} if put else None
            return TopicConfigChange(kind, name, configs, kv.mod_revision)
        if key.startswith(keys.partitions):
            topic, number = keys.parse_partition(key)
            state = (
                VersionedPartitionState(
                    topic, number, PartitionState.decode(kv.value), kv.mod_revision
                )
                if put
                else None
            )
            return PartitionChange(kind, topic, number, state, kv.mod_revision)
        log.warning("ignoring change of unknown metadata key %r", key)
        return None
