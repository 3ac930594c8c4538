"""One broker's membership in a cluster: its etcd session, its view of the cluster's
metadata, and the roles that view gives it (issue 15).

`ClusterNode` is the broker's control plane when ``etcd.endpoints`` is set
(`odradek.broker.control_plane.ControlPlane`, wired in by `odradek.wiring`):

* **Session**: a lease of ``broker.session.timeout.ms``, the broker's registration
  on it, and a campaign for the controller role whenever nobody holds it, through
  every etcd endpoint in turn. The lease is kept as long as etcd cannot have
  expired it (`odradek.cluster.lease_deadline`: etcd outages shorter than that, or
  with every member down, are ridden out). If it is lost (the process stalled, etcd
  unreachable past the deadline) the broker gives up every leadership at once,
  registers again on a new lease, taking over its own old registration if etcd
  still has it, and reloads the metadata.
* **View**: the whole cluster read at one revision (`EtcdMetadataStore.cluster`),
  then followed through one ordered watch. Changes are applied one at a time, in
  etcd's order: a topic is opened on disk here (`TopicManager.adopt`) before any
  of its partition states is applied, and each partition state gives this broker
  its role in the partition (the broker's `ReplicaManager.apply_state`): leader,
  follower (a `ReplicaFetcher` per leader broker), or none. The coordinator
  runtimes follow those roles from the replica layer; nothing here knows them.
* **Topics**: created and deleted in etcd (replicas placed from the live brokers,
  rack-aware), then opened or removed on every broker from the watch.
* **Controller**: the broker holding the role runs `odradek.cluster.controller`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

import aetcd.exceptions

from odradek.broker.config import etcd_endpoint_scheme
from odradek.broker.control_plane import (
    BrokerAddress,
    ControllerFigures,
    InternalTopic,
    PartitionInfo,
    ProducerIdsUnavailable,
    Quorum,
    Voter,
)
from odradek.broker.security.inter_broker import inter_broker
from odradek.broker.topics import LEGACY_GROUP_EVENTS_TOPIC, NewTopic, Topic, TopicError
from odradek.cancelling import cancel_and_wait
from odradek.cluster.controller import Controller
from odradek.cluster.dead_broker import DeadBrokerDetector
from odradek.cluster.etcd_tls import EtcdTls, failure_hint
from odradek.cluster.fetcher import LeaderConnection, ReplicaFetcher
from odradek.cluster.metadata import EtcdMetadataStore, LeaseKeeper
from odradek.cluster.peer_connection import PeerConnector
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import build, decode_response, request_type
from odradek.protocol.errors import ErrorCode
from odradek.protocol.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from odradek.replication.decisions import (
    ConcurrentChange,
    DecisionError,
    ElectionNotNeeded,
    EligibleLeadersNotAvailable,
    NoReassignmentInProgress,
    PreferredLeaderNotAvailable,
    Reassignment,
    assign_added_partitions,
    assign_replicas,
    cancel_reassignment,
    elect_leader,
    preferred_leader_election,
    start_reassignment,
)
from odradek.replication.model import (
    BrokerChange,
    BrokerIdInUseError,
    BrokerInfo,
    ChangeKind,
    ClusterJoinError,
    ClusterMetadata,
    ControllerChange,
    ControllerClaim,
    ControllerInfo,
    Endpoint,
    LeaseLost,
    MetadataError,
    MetadataWatchLost,
    PartitionChange,
    PartitionState,
    SecurityChange,
    TopicAssignment,
    TopicChange,
    TopicConfigChange,
    TopicExistsError,
    UnknownTopicError,
    VersionedPartitionState,
)
from odradek.replication.replica import Replica, Role

if TYPE_CHECKING:
    from odradek.broker.server import Broker

log = logging.getLogger("odradek.cluster")
T = TypeVar("T")

INTERNAL_TOPICS = (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)
PRODUCER_ID_BLOCK = 1000
ISR_CHECK_EVERY_S = 1.0
REJOIN_BACKOFF_S = (0.2, 1.0)  # etcd back: rejoin within a second
TOPIC_VISIBLE_TIMEOUT_S = 30.0
READY_WAIT_S = 10.0


def parse_endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.removeprefix(etcd_endpoint_scheme(text)).rpartition(":")
    return host, int(port)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# What etcd (or the way to it) refusing a metadata write is answered with, per topic.
METADATA_WRITE_FAILURES = (MetadataError, OSError, TimeoutError, aetcd.exceptions.ClientError)


def _metadata_failure(exc: BaseException) -> TopicError:
    """Kafka's answer to a topic change the metadata quorum did not take: REQUEST_TIMED_OUT
    (retriable) when it could not be reached, as Kafka's CreateTopics answers when its
    controller does not answer in time; UNKNOWN_SERVER_ERROR when it refused the write
    (an etcd limit, a bad request), as Kafka's QuorumController answers an unexpected
    failure."""
    unreachable = (
        aetcd.exceptions.ConnectionFailedError,
        aetcd.exceptions.ConnectionTimeoutError,
        OSError,
        TimeoutError,
        MetadataError,
    )
    code = (
        ErrorCode.REQUEST_TIMED_OUT
        if isinstance(exc, unreachable)
        else ErrorCode.UNKNOWN_SERVER_ERROR
    )
    return TopicError(code, f"cluster metadata: {_first_line(exc)}")


def _outcome(task: asyncio.Task[Any]) -> BaseException | None:
    return None if task.cancelled() else task.exception()


def cluster_id_for(cluster_name: str) -> str:
    """A Kafka-shaped cluster id (22 base64url characters) every broker derives alike."""
    raw = uuid.uuid5(uuid.NAMESPACE_URL, f"odradek-cluster:{cluster_name}").bytes
    return base64.urlsafe_b64encode(raw).decode()[:22]


class ProducerIdBlocks:
    """Producer ids from blocks reserved in etcd, so no two brokers hand out the same id.

    The next block is fetched while half of the current one is left, so
    `next_id` (synchronous: InitProducerId) rarely finds none.
    """

    def __init__(self, store: EtcdMetadataStore) -> None:
        self._store = store
        self._ids: list[range] = []
        self._refill: asyncio.Task[None] | None = None

    async def prime(self) -> None:
        await self._fetch()

    async def _fetch(self) -> None:
        first = await self._store.allocate_producer_ids(PRODUCER_ID_BLOCK)
        self._ids.append(range(first, first + PRODUCER_ID_BLOCK))

    def _left(self) -> int:
        return sum(len(r) for r in self._ids)

    def next_id(self) -> int:
        while self._ids and not self._ids[0]:
            self._ids.pop(0)
        if not self._ids:
            self._start_refill()
            raise ProducerIdsUnavailable("no producer id block reserved yet; retry")
        block = self._ids[0]
        self._ids[0] = block[1:]
        if self._left() < PRODUCER_ID_BLOCK // 2:
            self._start_refill()
        return block[0]

    async def refilled(self) -> None:
        """Until the refill under way, if any, is done."""
        if self._refill is not None:
            await self._refill

    def _start_refill(self) -> None:
        if self._refill is None or self._refill.done():
            self._refill = asyncio.get_running_loop().create_task(self._fetch())


class ClusterNode:
    """This broker's part in a cluster (see the module docstring)."""

    def __init__(self, broker: Broker) -> None:
        config = broker.config
        self.broker = broker
        self.broker_id = broker.node_id
        self.rack = str(config["broker.rack"]) or None
        # Members of one etcd cluster: the first that accepts a connection is used, the
        # next ones in turn whenever it goes away (`grpc_target`).
        self.etcd_endpoints = [parse_endpoint(e) for e in config["etcd.endpoints"]]
        self.cluster_name = str(config["etcd.cluster.name"])
        self.lease_ttl_s = max(int(config["broker.session.timeout.ms"]) // 1000, 2)
        self.unclean = bool(config["unclean.leader.election.enable"])
        # One id for the whole cluster: cluster.id if set, else derived from its etcd name.
        self.cluster_id = str(config["cluster.id"]) or cluster_id_for(self.cluster_name)
        # TLS files are read now: a missing or bad one is a ConfigError before any join.
        self.store = EtcdMetadataStore.for_endpoints(
            self.etcd_endpoints,
            cluster_name=self.cluster_name,
            request_timeout_s=10,
            tls=EtcdTls.from_config(config),
        )
        self.store.on_recovered = self._etcd_recovered
        # When this broker last saw etcd come back after an outage (loop time): the
        # controller holds off fencing missing brokers for a while after it
        # (`fencing_held_until`).
        self.etcd_recovered_at: float | None = None
        self.replicas = broker.replicas  # this node's replicas: their roles come from here
        # The coordinators' topics as their runtimes want them, created on the first
        # FindCoordinator that needs one (as Kafka does).
        self._internal_topics: dict[str, InternalTopic] = {}
        self.producer_ids = ProducerIdBlocks(self.store)
        # The view: what etcd said, as of the last change applied.
        self.brokers: dict[int, BrokerInfo] = {}
        self.controller_info: ControllerInfo | None = None
        self.assignments: dict[str, TopicAssignment] = {}
        self.topic_revisions: dict[str, int] = {}  # mod revision of each topic's key (CAS)
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.states: dict[tuple[str, int], VersionedPartitionState] = {}
        self.revision = 0
        self._revision_seen = asyncio.Event()
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._connections: dict[int, LeaderConnection] = {}  # to other brokers (markers)
        # Other brokers are reached on the inter-broker listener, authenticated there
        # with this broker's own credentials (checked here, at start: one-line errors).
        inter = inter_broker(config, broker.listeners, as_client=True)
        broker.security.inter_broker = inter
        self.inter_broker_listener = inter.listener if inter is not None else None
        self.peers = PeerConnector(inter)
        self.peers.on_refused = self._peer_refused
        self.dead_brokers = DeadBrokerDetector(
            self.broker_id,
            self.store,
            self.peer_address,
            lease_ttl_s=self.lease_ttl_s,
            fencing_held_until=self.fencing_held_until,
            clock=lambda: asyncio.get_running_loop().time(),
        )
        self.controller: Controller | None = None
        self._claim: ControllerClaim | None = None
        self.lease: LeaseKeeper | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._session_task: asyncio.Task[None] | None = None
        self._campaign_wake = asyncio.Event()
        self._stopping = False
        self.ready = asyncio.Event()
        # Elections made by controllers this broker was before the current one (metrics).
        self.leader_elections = 0
        self.unclean_elections = 0

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Join: register, load the metadata, follow it. Returns once the view is loaded."""
        where = ",".join("{}:{}".format(*e) for e in self.etcd_endpoints)
        try:
            await self._connect()
            await self._join()
            await self._publish_local_security()
            await self.producer_ids.prime()
        except BrokerIdInUseError as exc:
            await self._close_quietly()
            raise ClusterJoinError(f"broker id {self.broker_id} is taken: {exc}") from None
        except Exception as exc:  # etcd down or refusing: one clear line, not a traceback
            await self._close_quietly()
            reason = _first_line(exc)
            hint = failure_hint(reason, tls=self.store.tls is not None)
            raise ClusterJoinError(
                f"cannot join cluster {self.cluster_name!r} through etcd at {where}: "
                f"{hint + ': ' if hint else ''}{reason}"
            ) from None
        self._session_task = asyncio.create_task(self._run_session(), name="cluster-session")
        self._tasks.append(asyncio.create_task(self._check_isr(), name="cluster-isr"))
        self._tasks.append(asyncio.create_task(self.dead_brokers.run(), name="dead-brokers"))

    async def _connect(self) -> None:
        """Open the store and read once (does any etcd member answer?)."""
        await self.store.__aenter__()
        await self.store.controller_epoch()

    async def _join(self, replacing: LeaseKeeper | None = None) -> None:
        """Register on a new lease and load the view. `replacing`: this process's lease
        that its keeper gave up on; a registration still on it is taken over at once
        (`register_broker`), then the lease is revoked (with the controller role, if
        it still carries one: this broker gave that up already)."""
        lease = await self.store.grant_lease(self.lease_ttl_s)
        host, port = self.broker.advertised_host, self.broker.advertised_port
        endpoints = tuple(
            Endpoint(lst.name, lst.advertised_host, lst.advertised_port, lst.protocol)
            for lst in self.broker.listeners
        )
        info = BrokerInfo(self.broker_id, host, port, self.rack, os.getpid(), endpoints)
        deadline = asyncio.get_running_loop().time() + self.lease_ttl_s * 2
        old = None if replacing is None else replacing.lease_id
        try:
            while True:
                try:
                    await self.store.register_broker(info, lease, replacing=old)
                    break
                except BrokerIdInUseError:
                    # Another process with our id (a killed predecessor) holds it until
                    # its lease ends.
                    if asyncio.get_running_loop().time() > deadline:
                        raise
                    await asyncio.sleep(0.5)
        except BaseException:
            with contextlib.suppress(Exception):
                await lease.revoke()
            raise
        self.lease = lease
        if old is not None:
            with contextlib.suppress(Exception):
                await self.store.revoke_lease(old)
        snapshot = await self.store.cluster()
        await self._load(snapshot.items, snapshot.revision)
        log.info(
            "broker %d joined cluster %r (etcd %s, %d brokers, %d topics)",
            self.broker_id,
            self.cluster_name,
            ",".join("{}:{}".format(*e) for e in self.etcd_endpoints),
            len(self.brokers),
            len(self.assignments),
        )
        self.ready.set()

    def _etcd_recovered(self) -> None:
        self.etcd_recovered_at = asyncio.get_running_loop().time()
        if self.controller is not None:
            self.controller.hold_fencing(self.fencing_held_until())

    def fencing_held_until(self) -> float:
        """Until when (loop time) the controller treats brokers missing from etcd as
        not yet dead: one session timeout after etcd came back, as seen here.

        Kafka's KRaft controller fences a broker only after broker.session.timeout.ms
        without heartbeats *as seen by the active controller* (Kafka 4.1's
        BrokerHeartbeatManager: a new active controller does not know the last
        heartbeats, so every broker gets a whole session). Here etcd's leases are
        the heartbeats and they outlive a controller change, so a new controller needs
        no such wait (it would double every failover). But after an etcd outage
        brokers come back one by one: registrations that ended in the outage are not
        news of dead brokers, and acting on them would shrink every ISR to the first
        broker back and give it every leadership.
        """
        if self.etcd_recovered_at is None:
            return 0.0
        return self.etcd_recovered_at + self.lease_ttl_s

    async def _close_quietly(self) -> None:
        with contextlib.suppress(Exception):
            await self.store.close()

    async def stop(self) -> None:
        self._stopping = True
        tasks = [*self._tasks, *([self._session_task] if self._session_task else [])]
        await cancel_and_wait(tasks, "cluster tasks")
        for fetcher in self.fetchers.values():
            await fetcher.stop()
        if self.controller is not None:
            await self.controller.stop()
        with contextlib.suppress(Exception):
            if self._claim is not None:
                await self.store.resign_controller(self._claim)
        with contextlib.suppress(Exception):
            if self.lease is not None:
                await self.lease.revoke()  # others see this broker leave at once
        with contextlib.suppress(Exception):
            await self.store.close()

    async def _run_session(self) -> None:
        """Follow the metadata and campaign; on a lost lease or watch, join again."""
        backoff, largest = REJOIN_BACKOFF_S
        while not self._stopping:
            assert self.lease is not None
            lease = self.lease
            follow = asyncio.create_task(self._follow(self.revision + 1))
            campaign = asyncio.create_task(self._campaign(lease))
            lost = asyncio.create_task(lease.lost.wait())
            try:
                done, _ = await asyncio.wait({follow, lost}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (follow, campaign, lost):
                    task.cancel()
                await asyncio.gather(follow, campaign, lost, return_exceptions=True)
            if lost in done:
                log.error("broker %d lost its etcd lease: giving up every role", self.broker_id)
                await self._give_up_roles()
            else:
                log.warning("metadata watch ended: %r; reloading", _outcome(follow))
            while not self._stopping:
                try:
                    if lost in done:
                        await self._join(replacing=lease)
                    else:
                        snapshot = await self.store.cluster()
                        await self._load(snapshot.items, snapshot.revision)
                    if lost in done or backoff > REJOIN_BACKOFF_S[0]:
                        self._etcd_recovered()  # it was unreachable: brokers come back
                    backoff = REJOIN_BACKOFF_S[0]
                    break
                except (MetadataError, OSError, Exception) as exc:  # etcd down: keep trying
                    log.warning("rejoining the cluster failed: %r; retry in %.1fs", exc, backoff)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, largest)

    def _retire_controller(self) -> Controller | None:
        """Stop acting as controller (its counters are kept for the metrics)."""
        controller, self.controller, self._claim = self.controller, None, None
        if controller is not None:
            self.leader_elections += controller.leader_elections
            self.unclean_elections += controller.unclean_elections
        return controller

    async def _give_up_roles(self) -> None:
        controller = self._retire_controller()
        if controller is not None:
            await controller.stop()
        self.replicas.resign_all()

    # --- controller election ----------------------------------------------------------------

    async def _campaign(self, lease: LeaseKeeper) -> None:
        while True:
            if self.controller_info is None and self.controller is None:
                try:
                    won = await self.store.try_become_controller(self.broker_id, lease)
                except LeaseLost:
                    return
                if isinstance(won, ControllerClaim):
                    self._claim = won
                    log.info("broker %d is controller (epoch %d)", self.broker_id, won.info.epoch)
                    self.controller = Controller(self, won)
                    self.controller.hold_fencing(self.fencing_held_until())
                    self.controller.start()
            self._campaign_wake.clear()
            await self._campaign_wake.wait()

    # --- the view ---------------------------------------------------------------------------

    async def _load(self, metadata: ClusterMetadata, revision: int) -> None:
        """Replace the view with a snapshot, and act on every difference."""
        self.brokers = dict(metadata.brokers)
        self._set_controller(metadata.controller, revision)
        self.topic_configs = {k: dict(v) for k, v in metadata.topic_configs.items()}
        for name, document in metadata.security.items():
            self._take_security(name, document)
        for name in [n for n in self.assignments if n not in metadata.topics]:
            await self._topic_deleted(name)
        local_only = [
            t.name
            for t in self.broker.topics
            if t.name not in metadata.topics and not self._local_topic(t.name)
        ]
        for name in local_only:
            await self._topic_deleted(name)
        self.topic_revisions = dict(metadata.topic_revisions)
        for assignment in metadata.topics.values():
            await self._topic_put(assignment)
        self.states = dict(metadata.partitions)
        for state in metadata.partitions.values():
            self._partition_put(state)
        self._advance(revision)
        if self.controller is not None:
            self.controller.poke()

    def _local_topic(self, name: str) -> bool:
        """Topics each broker keeps for itself, never in etcd: the group history of older
        versions, no longer written (left alone where a data directory has it)."""
        return name == LEGACY_GROUP_EVENTS_TOPIC

    def _advance(self, revision: int) -> None:
        self.revision = max(self.revision, revision)
        self._revision_seen.set()
        self._revision_seen = asyncio.Event()

    async def wait_for_revision(self, revision: int, timeout_s: float) -> bool:
        """Whether this broker's view reached `revision` within `timeout_s`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.revision < revision:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._revision_seen.wait()
        return True

    async def _follow(self, start_revision: int) -> None:
        async for change in self.store.watch_cluster(start_revision):
            try:
                await self._apply(change)
            except Exception:
                log.exception("applying metadata change %r failed", change)
            self._advance(change.revision)
        raise MetadataWatchLost("watch ended")

    async def _apply(self, change: Any) -> None:
        if isinstance(change, BrokerChange):
            if change.kind is ChangeKind.PUT and change.broker is not None:
                self.brokers[change.broker_id] = change.broker
            else:
                self.brokers.pop(change.broker_id, None)
            if self.controller is not None:
                self.controller.poke()
        elif isinstance(change, ControllerChange):
            self._set_controller(change.controller, change.revision)
        elif isinstance(change, TopicChange):
            if change.kind is ChangeKind.PUT and change.assignment is not None:
                self.topic_revisions[change.topic] = change.revision
                await self._topic_put(change.assignment)
                # Replicas may have changed (reassignment, new partitions): roles follow.
                for key, state in list(self.states.items()):
                    if key[0] == change.topic:
                        self._partition_put(state)
                if self.controller is not None:
                    self.controller.poke()
            else:
                await self._topic_deleted(change.topic)
        elif isinstance(change, TopicConfigChange):
            if change.configs is not None:
                self.topic_configs[change.topic] = dict(change.configs)
                self.broker.topics.take_configs(change.topic, dict(change.configs))
        elif isinstance(change, SecurityChange):
            if change.document is not None:
                self._take_security(change.name, change.document)
        elif isinstance(change, PartitionChange):
            key = (change.topic, change.partition)
            if change.state is not None:
                self.states[key] = change.state
                self._partition_put(change.state)
                if self.controller is not None:
                    self.controller.poke()
            else:
                self.states.pop(key, None)

    def _set_controller(self, info: ControllerInfo | None, revision: int) -> None:
        claim = self._claim
        if claim is not None and revision < claim.create_revision:
            # Older than this broker's own claim: the watch can still be delivering the
            # previous controller's key (its put, or its deletion) after the claim won.
            # Taken as news, it would retire the controller the key now names (this
            # broker), and no broker would act as controller while etcd names one.
            return
        self.controller_info = info
        if (info is None or info.broker_id != self.broker_id) and (
            self.controller is not None
            and (info is None or self._claim is None or info.epoch != self._claim.info.epoch)
        ):
            log.warning("broker %d is no longer controller", self.broker_id)
            controller = self._retire_controller()
            if controller is not None:
                asyncio.get_running_loop().create_task(controller.stop())
        if info is None:
            self._campaign_wake.set()

    async def _topic_put(self, assignment: TopicAssignment) -> None:
        self.assignments[assignment.name] = assignment
        configs = self.topic_configs.get(assignment.name, {})
        hosted = self._hosted(assignment)
        self._stop_replicas_leaving(assignment.name, hosted)
        try:
            await self.broker.topics.adopt(
                assignment.name, assignment.topic_id, len(assignment.replicas), configs, hosted
            )
        except Exception:
            log.exception("cannot open topic %s on this broker", assignment.name)

    def _hosted(self, assignment: TopicAssignment) -> frozenset[int] | None:
        """The partitions with a replica on this broker (while a reassignment runs, its
        adding and removing replicas too); None for the internal topics, whose
        coordinators keep a log of every partition on every broker."""
        if assignment.name in INTERNAL_TOPICS:
            return None
        return frozenset(p for p, r in assignment.replicas.items() if self.broker_id in r)

    def _stop_replicas_leaving(self, name: str, hosted: frozenset[int] | None) -> None:
        """Stop replicating the partitions moved away from this broker (a completed
        reassignment) before their logs are deleted."""
        topic = self.broker.topics.get(name)
        if topic is None or hosted is None:
            return
        for index in topic.hosted():
            if index not in hosted:
                self.replicas.forget_partition(name, index)
                for fetcher in self.fetchers.values():
                    fetcher.remove((name, index))

    async def _topic_deleted(self, name: str) -> None:
        self.assignments.pop(name, None)
        self.topic_revisions.pop(name, None)
        self.topic_configs.pop(name, None)
        for key in [k for k in self.states if k[0] == name]:
            del self.states[key]
        self.replicas.forget(name)
        for fetcher in self.fetchers.values():
            for key in [k for k in fetcher.partitions if k[0] == name]:
                fetcher.remove(key)
        try:
            await self.broker.topics.forget(name)
        except Exception:
            log.exception("cannot remove topic %s from this broker", name)

    def _partition_put(self, state: VersionedPartitionState) -> None:
        assignment = self.assignments.get(state.topic)
        plog = self.broker.topics.partition(state.topic, state.partition)
        if assignment is None or plog is None:
            return
        assigned = tuple(assignment.replicas.get(state.partition, ()))
        replica = self.replicas.host(state.topic, state.partition, plog)
        role = self.replicas.apply_state(replica, assigned, state)
        key = (state.topic, state.partition)
        for leader_id, fetcher in self.fetchers.items():
            if leader_id != state.state.leader or role is not Role.FOLLOWER:
                fetcher.remove(key)
        if role is Role.FOLLOWER:
            self._fetcher_for(state.state.leader).add(key)
        self.broker.notify_append(state.topic, state.partition)  # long polls re-check roles

    def _fetcher_for(self, leader_id: int) -> ReplicaFetcher:
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            config = self.broker.config
            fetcher = ReplicaFetcher(
                self.broker_id,
                leader_id,
                self.replicas,
                self.peer_address,
                max_wait_ms=int(config["replica.fetch.wait.max.ms"]),
                max_bytes=int(config["replica.fetch.max.bytes"]),
                timeout_s=int(config["replica.socket.timeout.ms"]) / 1000,
                connect=self.peers.open,
            )
            self.fetchers[leader_id] = fetcher
        return fetcher

    # --- replication callbacks --------------------------------------------------------------

    def propose_isr(self, replica: Replica, isr: tuple[int, ...]) -> None:
        """A leader's ISR change: written to etcd by compare-and-swap (`_write_isr`)."""
        asyncio.get_running_loop().create_task(self._write_isr(replica, isr))

    async def _write_isr(self, replica: Replica, isr: tuple[int, ...]) -> None:
        """Propose an ISR change by compare-and-swap. Won or lost, a newer partition state
        now exists and the watch brings it; until then (`apply_state` clears the flag)
        the leader proposes nothing more, or it would race its own write."""
        current = replica.state
        if current is None or replica.role is not Role.LEADER:
            self.replicas.isr_change_failed(replica)
            return
        try:
            update = await self.store.update_partition(
                current,
                leader=current.state.leader,
                leader_epoch=current.state.leader_epoch,
                isr=isr,
            )
        except Exception as exc:  # etcd unreachable: nothing changed, may try again
            log.warning("%s-%d: ISR change failed: %r", replica.topic, replica.partition, exc)
            if replica.state is current:
                self.replicas.isr_change_failed(replica)
            return
        if not update.succeeded:
            log.info(
                "%s-%d: ISR change to %s lost to a concurrent change; the watch brings it",
                replica.topic,
                replica.partition,
                list(isr),
            )

    # --- transaction markers for partitions other brokers lead -----------------------------

    async def send_marker(
        self, tp: tuple[str, int], producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        """WriteTxnMarkers to the partition's leader; raises unless it wrote the marker."""
        topic, partition = tp
        state = self.states.get(tp)
        if state is None:
            return  # the topic is gone: nothing to mark
        leader = state.state.leader
        address = self.peer_address(leader) if leader >= 0 else None
        if address is None:
            raise ConnectionError(f"{topic}-{partition} has no live leader")
        request = build(
            request_type(ApiKey.WRITE_TXN_MARKERS, 1),
            {
                "markers": [
                    {
                        "producer_id": producer_id,
                        "producer_epoch": producer_epoch,
                        "transaction_result": commit,
                        "topics": [{"name": topic, "partition_indexes": [partition]}],
                        "coordinator_epoch": 0,
                    }
                ]
            },
        )
        connection = self._connection_to(leader, address)
        payload = await connection.send(ApiKey.WRITE_TXN_MARKERS, 1, request)
        _, response = decode_response(ApiKey.WRITE_TXN_MARKERS, 1, payload)
        for marker in response.markers:
            for t in marker.topics:
                for p in t.partitions:
                    if int(p.error_code):
                        raise RuntimeError(
                            f"broker {leader} refused the marker for {topic}-{partition}: "
                            f"error {int(p.error_code)}"
                        )

    def _connection_to(self, broker_id: int, address: tuple[str, int]) -> LeaderConnection:
        connection = self._connections.get(broker_id)
        if connection is None or (connection.host, connection.port) != address:
            if connection is not None:
                connection.close()
            connection = LeaderConnection(
                *address,
                f"odradek-broker-{self.broker_id}",
                int(self.broker.config["replica.socket.timeout.ms"]) / 1000,
                self.peers.open,
            )
            self._connections[broker_id] = connection
        return connection

    async def _check_isr(self) -> None:
        while True:
            await asyncio.sleep(ISR_CHECK_EVERY_S)
            try:
                self.replicas.shrink_lagging()
            except Exception:
                log.exception("ISR check failed")

    # --- what handlers ask -----------------------------------------------------------------

    def address_of(self, broker_id: int, listener: str | None = None) -> tuple[str, int] | None:
        """A live broker's address on a listener (None: the one it registered first);
        None if it is not live or has no such listener."""
        info = self.brokers.get(broker_id)
        return info.address_on(listener) if info is not None else None

    def peer_address(self, broker_id: int) -> tuple[str, int] | None:
        """Where this broker reaches another: its inter-broker listener."""
        return self.address_of(broker_id, self.inter_broker_listener)

    def _peer_refused(self, host: str, port: int) -> None:
        """A connection to another broker was refused: is it dead? (`dead_broker`)"""
        for broker_id in list(self.brokers):
            if self.peer_address(broker_id) == (host, port):
                self.dead_brokers.suspect(broker_id)

    def replicas_of(self, topic: str, partition: int) -> tuple[int, ...]:
        assignment = self.assignments.get(topic)
        return tuple(assignment.replicas.get(partition, ())) if assignment is not None else ()

    def controller_id(self) -> int:
        return self.controller_info.broker_id if self.controller_info is not None else -1

    async def coordinator_for(self, topic: str, partition: int) -> tuple[ErrorCode, int, str]:
        """(error code, broker id, message) of the leader of a coordinator partition,
        creating the internal topic first if it does not exist yet (as Kafka)."""
        if topic not in self.assignments:
            error = await self._create_internal(topic)
            if error:
                return error
        state = self.states.get((topic, partition))
        if state is None or state.state.leader < 0 or state.state.leader not in self.brokers:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, f"{topic}-{partition} has no leader"
        return ErrorCode.NONE, state.state.leader, ""

    def want_internal_topic(self, topic: InternalTopic) -> None:
        self._internal_topics[topic.name] = topic

    async def _create_internal(self, name: str) -> tuple[ErrorCode, int, str] | None:
        spec = self._internal_topics.get(name)
        if spec is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, f"{name} is no coordinator's topic here"
        configs = dict(spec.configs)
        if spec.min_insync_replicas is not None:
            configs["min.insync.replicas"] = str(spec.min_insync_replicas)
        wanted = NewTopic(
            name, spec.partitions, spec.replication_factor, dict(configs), internal_configs=True
        )
        (result,) = await self.create_topics([wanted], internal=True)
        if isinstance(result, TopicError) and result.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, f"cannot create {name}: {result}"
        return None

    # --- topics (the control plane's TopicControl) -----------------------------------------

    def placement_error(self, wanted: NewTopic) -> TopicError | None:
        """Placement is checked when the topic is written to etcd (`create_topics`)."""
        return None

    async def create_topics(
        self, wanted: list[NewTopic], *, internal: bool = False, existing_ok: bool = False
    ) -> list[Topic | TopicError]:
        """Place replicas, write each topic to etcd, and wait until this broker holds it.

        `existing_ok` (auto-creation): a topic that exists already, or that another
        broker creates meanwhile, is waited for and returned instead of refused.
        """
        topics = self.broker.topics
        results: list[Topic | TopicError] = []
        for request in wanted:
            if existing_ok and request.name in self.assignments:
                revision = self.topic_revisions.get(request.name, self.revision)
                results.append(await self._held(request.name, revision))
                continue
            try:
                if not internal and request.name in INTERNAL_TOPICS:
                    raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"{request.name} is internal")
                if request.name in self.assignments:
                    raise TopicError(
                        ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {request.name!r} already exists"
                    )
                topic, count = topics.prepare(request)
                if request.assignments is not None:
                    replicas = self._checked_assignment(request.assignments)
                else:
                    factor = request.replication_factor
                    if factor == -1:
                        factor = int(self.broker.config["default.replication.factor"])
                    replicas = self._place(count, factor)
                assignment = TopicAssignment(request.name, topic.topic_id, replicas)
                revision = await self.store.create_topic(assignment, topic.configs)
            except TopicError as exc:
                results.append(exc)
                continue
            except TopicExistsError as exc:
                if existing_ok:  # created by another broker meanwhile: wait until held here
                    snapshot = await self.store.controller()
                    results.append(await self._held(request.name, snapshot.revision))
                else:
                    results.append(TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, str(exc)))
                continue
            except METADATA_WRITE_FAILURES as exc:
                results.append(_metadata_failure(exc))
                continue
            results.append(await self._held(request.name, revision))
        return results

    def _place(self, partitions: int, factor: int) -> dict[int, tuple[int, ...]]:
        live = {b: info.rack for b, info in sorted(self.brokers.items())}
        try:
            start = uuid.uuid4().int % max(len(live), 1)  # spread first replicas as Kafka
            return assign_replicas(partitions, factor, live, start_index=start)
        except DecisionError as exc:
            raise TopicError(exc.error_code, str(exc)) from None

    def _checked_assignment(
        self, assignments: dict[int, tuple[int, ...]]
    ) -> dict[int, tuple[int, ...]]:
        """A manual assignment, checked as Kafka checks one (partitions 0..n-1, one
        replication factor, no repeats, registered brokers)."""
        if sorted(assignments) != list(range(len(assignments))):
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "partitions of a manual assignment must be 0..n-1",
            )
        factors = {len(r) for r in assignments.values()}
        if len(factors) != 1 or 0 in factors:
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "every partition needs the same, non-zero number of replicas",
            )
        for partition, replicas in sorted(assignments.items()):
            if len(set(replicas)) != len(replicas):
                raise TopicError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"partition {partition} repeats a replica: {list(replicas)}",
                )
            unknown = sorted(set(replicas) - set(self.brokers))
            if unknown:
                raise TopicError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"partition {partition}: brokers {unknown} are not live",
                )
        return dict(assignments)

    async def _held(self, name: str, revision: int) -> Topic | TopicError:
        if not await self.wait_for_revision(revision, TOPIC_VISIBLE_TIMEOUT_S):
            return TopicError(
                ErrorCode.REQUEST_TIMED_OUT, f"topic {name!r} created; not visible here yet"
            )
        topic = self.broker.topics.get(name)
        if topic is None:
            return TopicError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"topic {name!r} could not be opened here"
            )
        return topic

    async def delete_topics(self, names: list[str]) -> dict[str, TopicError | None]:
        outcome: dict[str, TopicError | None] = {}
        for name in dict.fromkeys(names):
            if name in INTERNAL_TOPICS:
                outcome[name] = TopicError(
                    ErrorCode.INVALID_REQUEST, f"internal topic {name!r} cannot be deleted"
                )
                continue
            try:
                await self.store.delete_topic(name)
                outcome[name] = None
            except UnknownTopicError:
                outcome[name] = TopicError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
                )
            except (MetadataError, OSError) as exc:
                outcome[name] = TopicError(ErrorCode.REQUEST_TIMED_OUT, f"cluster metadata: {exc}")
        if any(v is None for v in outcome.values()):
            snapshot = await self.store.controller()  # any read: its revision covers ours
            await self.wait_for_revision(snapshot.revision, TOPIC_VISIBLE_TIMEOUT_S)
        return outcome

    async def alter_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """AlterConfigs in a cluster: store the topic's new overrides (already checked)
        in etcd; every broker, this one included, takes them from the watch."""
        try:
            await self.store.set_topic_configs(name, configs)
            snapshot = await self.store.controller()  # a read: its revision covers ours
        except UnknownTopicError:
            raise TopicError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
            ) from None
        except (MetadataError, OSError) as exc:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"cluster metadata: {exc}") from None
        await self.wait_for_revision(snapshot.revision, TOPIC_VISIBLE_TIMEOUT_S)

    async def wait_ready(self, timeout_s: float = READY_WAIT_S) -> None:
        """Until this broker has joined and loaded the metadata (bounded: then answer
        with what it has, and the client asks again)."""
        if not self.ready.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self.ready.wait()

    def next_producer_id(self) -> int:
        return self.producer_ids.next_id()

    # --- security (ACLs and SCRAM credentials are cluster-wide, in etcd) ------------------

    def _security_store(self, name: str) -> Any:
        security = self.broker.security
        return security.acls if name == "acls" else security.credentials

    def _take_security(self, name: str, document: dict[str, Any]) -> None:
        store = self._security_store(name)
        if store.to_document() != document:
            store.load_document(document)
            log.info("took the cluster's %s from etcd", name)

    async def change_security(self, name: str, change: Callable[[Any], T]) -> T:
        """Apply `change` to the cluster's ACLs ("acls") or SCRAM credentials ("scram")
        in etcd, compare-and-swap, retried on the newer document if another broker
        wrote in between; returns `change`'s result once this broker holds the result."""
        kind = type(self._security_store(name))
        outcome: list[T] = []

        def edit(current: dict[str, Any] | None) -> dict[str, Any]:
            base = current if current is not None else self._security_store(name).to_document()
            store = kind.detached(base)
            outcome[:] = [change(store)]
            document: dict[str, Any] = store.to_document()
            return document

        revision = await self.store.update_security(name, edit)
        await self.wait_for_revision(revision, TOPIC_VISIBLE_TIMEOUT_S)
        return outcome[0]

    async def _publish_local_security(self) -> None:
        """On joining: what this broker holds that etcd has not got yet goes there: the
        `--add-scram` users (new credentials only, as Kafka's storage tool), and the
        ACLs of a single node that becomes the first broker of a cluster."""
        local_scram = self.broker.security.credentials.to_document()["credentials"]
        if local_scram:

            def add_missing(current: dict[str, Any] | None) -> dict[str, Any]:
                entries = list((current or {}).get("credentials", []))
                held = {(e["user"], e["mechanism"]) for e in entries}
                entries += [e for e in local_scram if (e["user"], e["mechanism"]) not in held]
                return {"credentials": entries}

            await self.store.update_security("scram", add_missing)
        local_acls = self.broker.security.acls.to_document()
        if local_acls["acls"]:
            await self.store.update_security(
                "acls", lambda current: current if current is not None else local_acls
            )

    # --- partition administration (AlterPartitionReassignments, ElectLeaders) ------------

    def unclean_for(self, topic: str) -> bool:
        """unclean.leader.election.enable for a topic: its override, else the broker's."""
        override = self.topic_configs.get(topic, {}).get("unclean.leader.election.enable")
        return self.unclean if override is None else override.strip().lower() == "true"

    def _live(self) -> frozenset[int]:
        return frozenset(self.brokers)

    async def reassign(self, topic: str, partition: int, target: list[int] | None) -> None:
        """Start (or, with None, cancel) moving a partition's replicas (KIP-455).

        The new replica list (target first, then the leaving replicas) goes to etcd
        by compare-and-swap on the topic; the new replicas start fetching at once and
        the controller completes the move when the whole target is in the ISR.
        Raises DecisionError (Kafka's error code) or LookupError (unknown partition).
        """
        assignment = self.assignments.get(topic)
        state = self.states.get((topic, partition))
        if assignment is None or state is None or partition not in assignment.replicas:
            raise LookupError(f"unknown partition {topic}-{partition}")
        ongoing = Reassignment.of(assignment, partition)
        in_progress = bool(ongoing.adding or ongoing.removing)
        new_state = None
        if in_progress:
            original, new_state = cancel_reassignment(
                ongoing, state.state, self._live(), unclean=self.unclean_for(topic)
            )
        else:
            original = ongoing.replicas
        if target is None:
            if not in_progress:
                raise NoReassignmentInProgress(f"no reassignment of {topic}-{partition} runs")
            wanted = Reassignment(original, (), ())
        else:
            wanted = start_reassignment(original, target, live=self._live())
        if new_state is not None:  # the revert changes leadership or the ISR first
            update = await self.store.update_partition(
                state,
                leader=new_state.leader,
                leader_epoch=new_state.leader_epoch,
                isr=new_state.isr,
            )
            if not update.succeeded:
                raise ConcurrentChange(f"{topic}-{partition} changed meanwhile; retry")
        await self.write_assignment(wanted.applied_to(assignment, partition))

    async def write_assignment(self, assignment: TopicAssignment, **options: Any) -> None:
        """Compare-and-swap a topic's assignment against the revision this broker last saw;
        ConcurrentChange if it changed meanwhile. Returns once this broker's view has it."""
        update = await self.store.update_topic_assignment(
            assignment, expected_revision=self.topic_revisions.get(assignment.name, 0), **options
        )
        if not update.succeeded:
            raise ConcurrentChange(f"topic {assignment.name!r} changed meanwhile; retry")
        if update.current is not None:
            await self.wait_for_revision(update.current.mod_revision, TOPIC_VISIBLE_TIMEOUT_S)

    def reassignments(self) -> dict[tuple[str, int], Reassignment]:
        """Every partition reassignment in progress."""
        found = {}
        for name, assignment in self.assignments.items():
            for partition in assignment.replicas:
                ongoing = Reassignment.of(assignment, partition)
                if ongoing.adding or ongoing.removing:
                    found[name, partition] = ongoing
        return found

    async def elect(self, topic: str, partition: int, *, preferred: bool) -> None:
        """ElectLeaders: the preferred replica (if live and in sync), or, unclean, any live
        replica for a partition without a leader. Raises DecisionError or LookupError."""
        state = self.states.get((topic, partition))
        replicas = self.replicas_of(topic, partition)
        if state is None or not replicas:
            raise LookupError(f"unknown partition {topic}-{partition}")
        live = self._live()
        if preferred:
            wanted = preferred_leader_election(replicas, state.state, live)
            if wanted is None:
                if state.state.leader == replicas[0]:
                    raise ElectionNotNeeded("the preferred replica already leads")
                raise PreferredLeaderNotAvailable("the preferred replica is not live and in sync")
        else:
            if state.state.leader in live:
                raise ElectionNotNeeded(f"{topic}-{partition} has a live leader")
            elected = elect_leader(replicas, state.state.isr, live, unclean=True)
            if elected is None:
                raise EligibleLeadersNotAvailable("no replica of the partition is live")
            wanted = PartitionState(
                elected[0], state.state.leader_epoch + 1, elected[1], state.state.partition_epoch
            )
        update = await self.store.update_partition(
            state,
            leader=wanted.leader,
            leader_epoch=wanted.leader_epoch,
            isr=wanted.isr,
            controller=self._claim,
        )
        if not update.succeeded:
            raise ConcurrentChange(f"{topic}-{partition} changed meanwhile; retry")
        self.leader_elections += 1

    async def add_partitions(self, name: str, total: int) -> None:
        """CreatePartitions: place the new partitions and store them with their states."""
        assignment = self.assignments.get(name)
        if assignment is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        live = {b: info.rack for b, info in sorted(self.brokers.items())}
        try:
            replicas = assign_added_partitions(
                assignment.replicas, total, live, topic=name, start_index=None
            )
        except DecisionError as exc:
            raise TopicError(exc.error_code, str(exc)) from None
        added = {p: r for p, r in replicas.items() if p not in assignment.replicas}
        states = {p: PartitionState(r[0], 0, tuple(r)) for p, r in added.items()}
        grown = replace(assignment, replicas={**assignment.replicas, **added})
        try:
            await self.write_assignment(grown, added_partition_states=states)
        except ConcurrentChange as exc:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, str(exc)) from None
        except METADATA_WRITE_FAILURES as exc:
            raise _metadata_failure(exc) from exc

    # --- views for Metadata and the CLI ----------------------------------------------------

    def partition_info(self, topic: str, partition: int) -> PartitionInfo:
        """Leader, epoch, replicas, ISR and offline replicas of one partition, as etcd says
        (LEADER_NOT_AVAILABLE while its leader is not live)."""
        replicas = self.replicas_of(topic, partition)
        state = self.states.get((topic, partition))
        offline = tuple(b for b in replicas if b not in self.brokers)
        if state is None:
            return PartitionInfo(ErrorCode.LEADER_NOT_AVAILABLE, -1, -1, replicas, (), offline)
        leader = state.state.leader if state.state.leader in self.brokers else -1
        if leader == self.broker_id and not self.replicas.leads(topic, partition):
            # It gave up its roles (its lease lost): not the leader until the watch says so
            leader = -1
        error = ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE
        return PartitionInfo(
            error, leader, state.state.leader_epoch, replicas, state.state.isr, offline
        )

    def live_brokers(self, listener: str | None = None) -> list[BrokerAddress]:
        """Live brokers at their address on `listener`; those without it are left out,
        as Kafka's metadata cache answers (KRaftMetadataCache.getAliveBrokerNodes)."""
        found = []
        for b in sorted(self.brokers.values(), key=lambda b: b.broker_id):
            address = b.address_on(listener)
            if address is not None:
                found.append(BrokerAddress(b.broker_id, *address, b.rack))
        return found

    def lists_topic(self, name: str) -> bool:
        return name in self.assignments

    def quorum(self) -> Quorum:
        """etcd plays KRaft's quorum: the voters are the live brokers, the leader the
        controller with its epoch, the high watermark the revision this view reached (a
        broker knows only its own progress and the controller's: -1 for the others)."""
        controller = self.controller_info
        if controller is None:
            return Quorum(None, -1, -1, ())
        voters = []
        for broker_id in sorted(self.brokers):
            info = self.brokers[broker_id]
            leads = broker_id == controller.broker_id
            known = broker_id == self.broker_id or leads
            voters.append(
                Voter(broker_id, self.revision if known else -1, leads, info.host, info.port)
            )
        return Quorum(controller.broker_id, controller.epoch, self.revision, tuple(voters))

    def figures(self) -> ControllerFigures:
        controller = self.controller
        return ControllerFigures(
            active_controller=controller is not None,
            offline_partitions=sum(1 for s in self.states.values() if s.state.leader < 0),
            leader_elections=self.leader_elections
            + (controller.leader_elections if controller else 0),
            unclean_elections=self.unclean_elections
            + (controller.unclean_elections if controller else 0),
        )
