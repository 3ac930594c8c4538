"""ApiVersions: generated from the handler registry."""

from __future__ import annotations

from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import advertised, handles
from odradek.protocol.apikeys import ApiKey


@handles(ApiKey.API_VERSIONS, 0, 3)
def api_versions(ctx: RequestContext, request: Any) -> Any:
    return respond(
        ctx,
        {
            "error_code": 0,
            "api_keys": [
                {"api_key": key, "min_version": lo, "max_version": hi}
                for key, lo, hi in advertised()
            ],
            "throttle_time": NO_THROTTLE,
            "supported_features": (),
            "finalized_features_epoch": -1,
            "finalized_features": (),
            "zk_migration_ready": False,
        },
    )
