"""Partition assignors: range, roundrobin, sticky, cooperative-sticky, and custom ones.

>>> from odradek.client.assignors import get_assignor
>>> from odradek.protocol.consumer_protocol import Subscription
>>> a = get_assignor("roundrobin")
>>> out = a.assign({"t": 3}, {"m1": Subscription(("t",)), "m2": Subscription(("t",))})
>>> [out[m].topic_partitions() for m in ("m1", "m2")]
[[('t', 0), ('t', 2)], [('t', 1)]]
"""

from odradek.client.assignors.base import (
    AbstractAssignor,
    Assignor,
    Cluster,
    RebalanceProtocol,
    cooperative_violations,
    member_sort_key,
    select_rebalance_protocol,
    to_assignment,
)
from odradek.client.assignors.range import RangeAssignor
from odradek.client.assignors.registry import (
    available_assignors,
    get_assignor,
    register_assignor,
    unregister_assignor,
)
from odradek.client.assignors.roundrobin import RoundRobinAssignor
from odradek.client.assignors.sticky import (
    CooperativePlan,
    CooperativeStickyAssignor,
    StickyAssignor,
)
from odradek.protocol.consumer_protocol import Assignment, Subscription

__all__ = [
    "AbstractAssignor",
    "Assignment",
    "Assignor",
    "Cluster",
    "CooperativePlan",
    "CooperativeStickyAssignor",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "available_assignors",
    "cooperative_violations",
    "get_assignor",
    "member_sort_key",
    "register_assignor",
    "select_rebalance_protocol",
    "to_assignment",
    "unregister_assignor",
]
