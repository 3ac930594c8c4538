"""The consumer-protocol blobs the coordinator reads (subscriptions, assignments).

The single implementation lives in :mod:`odradek.protocol.consumer_protocol`; this module
re-exports the names the coordinator and its tests use, so nothing is written twice.
"""

from odradek.protocol.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    Assignment,
    ConsumerProtocolError,
    Subscription,
    encode_assignment,
    encode_subscription,
    parse_assignment,
    parse_subscription,
    subscribed_topics,
)

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "Assignment",
    "ConsumerProtocolError",
    "Subscription",
    "encode_assignment",
    "encode_subscription",
    "parse_assignment",
    "parse_subscription",
    "subscribed_topics",
]
