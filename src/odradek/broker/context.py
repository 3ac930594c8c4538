"""What a handler knows about the request it serves."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.protocol.codec import RequestHeader, build, response_type

if TYPE_CHECKING:
    from odradek.broker.server import Broker


@dataclass(frozen=True, slots=True)
class RequestContext:
    broker: Broker
    header: RequestHeader
    client_host: str
    connection_id: int

    @property
    def version(self) -> int:
        return self.header.api_version


def respond(ctx: RequestContext, values: dict[str, Any]) -> Any:
    """The response entity for the request's API and version, from a dict of fields."""
    return build(response_type(ctx.header.api_key, ctx.version), values)


NO_THROTTLE = datetime.timedelta(0)
