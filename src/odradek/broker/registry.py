"""The API registry: each handler module registers the API key and the version
range it serves, and ApiVersions is generated from what is registered.

`min_version..max_version` is what Odradek advertises. `parse_from` is the
oldest version it can actually decode; Kafka 4 advertises Produce v0-2 for old
clients' feature probes but refuses them on use, and so does Odradek.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.protocol.apikeys import ApiKey

if TYPE_CHECKING:
    from odradek.broker.context import RequestContext
    from odradek.protocol.codec import RequestHeader

Handler = Callable[["RequestContext", Any], "Any | Awaitable[Any]"]
Reader = Callable[["RequestHeader", bytes, int], Any]
"""(header, frame, position after the header's fixed part) -> the request body."""


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: ApiKey
    min_version: int
    max_version: int
    handler: Handler
    is_async: bool
    parse_from: int
    reader: Reader | None = None  # a hand-written request reader (else kio's)

    def serves(self, version: int) -> bool:
        return self.parse_from <= version <= self.max_version


REGISTRY: dict[int, ApiSpec] = {}


def handles(
    key: ApiKey,
    min_version: int,
    max_version: int,
    *,
    parse_from: int | None = None,
    reader: Reader | None = None,
) -> Callable[[Handler], Handler]:
    """Register a handler for `key`, advertised as `min_version..max_version`; `reader`
    reads its requests instead of kio (a hot path's hand-written parser)."""

    def register(handler: Handler) -> Handler:
        if key in REGISTRY:
            raise RuntimeError(f"two handlers registered for {key.name}")
        REGISTRY[key] = ApiSpec(
            key,
            min_version,
            max_version,
            handler,
            inspect.iscoroutinefunction(handler),
            min_version if parse_from is None else parse_from,
            reader,
        )
        return handler

    return register


def advertised() -> list[tuple[int, int, int]]:
    """(api key, min, max) for ApiVersions, sorted by key."""
    return sorted((int(s.key), s.min_version, s.max_version) for s in REGISTRY.values())
