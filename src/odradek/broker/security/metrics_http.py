"""The metrics endpoint's HTTP server, optionally behind a bearer token.

Prometheus scrapes send ``Authorization: Bearer <token>`` (``authorization:
{credentials_file: ...}`` in a scrape config); any other request gets 401.
Without a token the endpoint must be bound to a loopback address, which
``odradek serve`` enforces.
"""

from __future__ import annotations

import hmac
import ipaddress
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not worth a log line each."""


def _require_bearer(app: WsgiApp, token: str) -> WsgiApp:
    expected = f"Bearer {token}".encode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        given = str(environ.get("HTTP_AUTHORIZATION", "")).encode()
        if not hmac.compare_digest(given, expected):
            start_response(
                "401 Unauthorized",
                [("Content-Type", "text/plain"), ("WWW-Authenticate", 'Bearer realm="odradek"')],
            )
            return [b"a bearer token is required\n"]
        return app(environ, start_response)

    return guarded


def serve_metrics(registry: CollectorRegistry, host: str, port: int, token: str | None) -> None:
    """Serve /metrics from a daemon thread."""
    app: WsgiApp = make_wsgi_app(registry)
    if token:
        app = _require_bearer(app, token)
    server = make_server(host, port, app, _ThreadingServer, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="odradek-metrics", daemon=True).start()
