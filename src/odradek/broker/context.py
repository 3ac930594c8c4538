"""What a handler knows about the request it serves."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from odradek.broker.closing import CloseConnection as CloseConnection  # server.py's import
from odradek.broker.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
)
from odradek.broker.security.principal import ANONYMOUS, KafkaPrincipal
from odradek.protocol.codec import RequestHeader, build, response_type

if TYPE_CHECKING:
    from odradek.broker.config import BrokerConfig
    from odradek.broker.control_plane import ControlPlane
    from odradek.broker.fetch_sessions import FetchSessionCache
    from odradek.broker.group_runtime import GroupCoordinatorRuntime
    from odradek.broker.security.listeners import Listener
    from odradek.broker.security.manager import BrokerSecurity
    from odradek.broker.security.session import Session
    from odradek.broker.topics import TopicManager
    from odradek.broker.txn_runtime import TransactionCoordinatorRuntime
    from odradek.broker.waiters import AppendWaiters
    from odradek.replication.replica import ReplicaManager


class BrokerParts(Protocol):
    """What request handlers reach of their broker (``server.Broker`` is one): its
    parts, not its connections, so handlers do not depend on the server module."""

    config: BrokerConfig
    node_id: int
    listeners: list[Listener]
    topics: TopicManager
    replicas: ReplicaManager
    control: ControlPlane
    groups: GroupCoordinatorRuntime
    txns: TransactionCoordinatorRuntime
    security: BrokerSecurity
    waiters: AppendWaiters
    fetch_sessions: FetchSessionCache

    @property
    def cluster_id(self) -> str: ...


# Not frozen: one per request, and frozen construction costs 4x (see RequestHeader).
@dataclass(slots=True)
class RequestContext:
    broker: BrokerParts
    header: RequestHeader
    client_host: str
    connection_id: int
    session: Session | None = None  # None: a request built outside a connection (tests)

    @property
    def version(self) -> int:
        return self.header.api_version

    # --- security: who asks, through which listener, and may they --------------------

    @property
    def principal(self) -> KafkaPrincipal:
        return self.session.principal if self.session is not None else ANONYMOUS

    @property
    def advertised(self) -> tuple[str, int]:
        """This node's address as the clients of the request's listener know it."""
        if self.session is not None:
            listener = self.session.listener
            return listener.advertised_host, listener.advertised_port
        return self.broker.advertised_host, self.broker.advertised_port

    @property
    def listener_name(self) -> str | None:
        """The listener the request came in on (None outside a connection)."""
        return self.session.listener.name if self.session is not None else None

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """Kafka's AuthHelper.authorize: always true when no authorizer is configured."""
        authorizer = self.broker.security.authorizer
        return authorizer is None or authorizer.authorize(
            self.principal, self.client_host, operation, resource_type, name
        )

    def may_act_as_replica(self) -> bool:
        """Whether a Fetch or OffsetsForLeaderEpoch naming a replica id (>= 0) is served:
        only on the inter-broker listener, and (Kafka's rule, KafkaApis.handleFetchRequest)
        to a principal with CLUSTER_ACTION on the cluster when an authorizer is
        configured. Why the listener too: docs/security.md, "Securing replication"."""
        inter = self.broker.security.inter_broker
        if inter is not None and self.listener_name not in (None, inter.listener):
            return False
        return self.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)

    def authorize_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Kafka's authorizeByResourceType: allowed on at least one resource of the type."""
        authorizer = self.broker.security.authorizer
        return authorizer is None or authorizer.authorize_any(
            self.principal, self.client_host, operation, resource_type
        )

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """The ``authorized_operations`` bit field of Metadata / DescribeGroups / ..."""
        authorizer = self.broker.security.authorizer
        if authorizer is None:
            return sum(1 << int(op) for op in SUPPORTED_OPERATIONS[resource_type])
        return authorizer.authorized_operations(
            self.principal, self.client_host, resource_type, name
        )


def respond(ctx: RequestContext, values: dict[str, Any]) -> Any:
    """The response entity for the request's API and version, from a dict of fields."""
    return build(response_type(ctx.header.api_key, ctx.version), values)


NO_THROTTLE = datetime.timedelta(0)
