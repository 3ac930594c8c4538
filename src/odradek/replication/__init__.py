"""Replication: the rules every node follows for the partitions it hosts, below the
broker's handlers and above the partition log (Kafka's ReplicaManager, Partition and
the controller's decisions).

It imports ``odradek.log`` and ``odradek.protocol``, never the broker or the etcd
shell: a lone node and a cluster member run the same code here, with a different
control plane giving the replicas their roles.

* `replica`: `ReplicaManager` and `Replica`: roles, leader epochs and their
  checks, the high watermark and its listeners, the ISR (shrink and expand, the
  proposal going to the control plane), acks=all, leader appends, a follower's
  truncation (off the event loop).
* `writer`: `ReplicaWriter`, a coordinator runner's partition writer over the
  replica manager.
* `truncation`: where a follower cuts its log after a leader change (pure).
* `decisions`: what a controller decides, as pure functions (replica assignment,
  leader election, ISR-change validation, reassignment).
* `model`: the values of the cluster metadata (brokers, controller, topics,
  partition states), the watch events and the errors, as etcd stores them
  (`odradek.cluster.metadata` holds the keys).
"""
