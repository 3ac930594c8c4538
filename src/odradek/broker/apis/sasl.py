"""SaslHandshake and SaslAuthenticate (KIP-152, KIP-368): the connection's Session
runs the exchange; these handlers only translate to and from the wire."""

from __future__ import annotations

from typing import Any

from odradek.broker.context import RequestContext, respond
from odradek.broker.registry import handles
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode


@handles(ApiKey.SASL_HANDSHAKE, 0, 1)
def sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    if ctx.session is None:
        return respond(ctx, {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": ()})
    error_code, mechanisms = ctx.session.handshake(ctx.version, request.mechanism)
    return respond(ctx, {"error_code": error_code, "mechanisms": mechanisms})


@handles(ApiKey.SASL_AUTHENTICATE, 0, 2)
def sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    if ctx.session is None:
        error_code, message, challenge, lifetime_ms = ErrorCode.ILLEGAL_SASL_STATE, None, b"", 0
    else:
        error_code, message, challenge, lifetime_ms = ctx.session.authenticate(
            ctx.version, bytes(request.auth_bytes)
        )
    return respond(
        ctx,
        {
            "error_code": error_code,
            "error_message": message,
            "auth_bytes": challenge,
            "session_lifetime": lifetime_ms,
        },
    )
