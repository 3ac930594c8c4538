"""The one place that decides what a broker is wired to: its own control plane (a lone
node, `odradek.broker.lone_node`), or a cluster's through etcd (`odradek.cluster.node`),
as ``etcd.endpoints`` says. The broker itself never asks which it has, and never
imports the etcd shell: it is handed a factory here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.server import Broker, ControlPlaneFactory


def control_plane_for(config: BrokerConfig) -> ControlPlaneFactory | None:
    """The cluster's control plane when ``etcd.endpoints`` is set (None: the broker's
    own, a lone node); a ConfigError when the `cluster` extra is missing."""
    if not config["etcd.endpoints"]:
        return None
    try:
        from odradek.cluster.node import ClusterNode
    except ImportError as exc:  # aetcd is the optional `cluster` extra
        raise ConfigError(
            f"etcd.endpoints needs the cluster extra ({exc.name} is missing): "
            "pip install 'odradek[cluster]'"
        ) from None
    return ClusterNode


def new_broker(
    data_dir: Path | Sequence[Path], config: BrokerConfig | None = None, **options: Any
) -> Broker:
    """A broker on ``data_dir`` with ``config``, wired to its control plane; ``options``
    are `Broker`'s (listen address, advertised address, metrics)."""
    config = config or BrokerConfig()
    plane = control_plane_for(config)  # checked before any file opens
    if plane is None:
        return Broker(data_dir, config, **options)
    return Broker(data_dir, config, control_plane=plane, **options)
