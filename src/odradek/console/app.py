"""The console's web application (aiohttp): pages, the JSON API, live updates, safety.

Routes::

    /groups  /groups/{group}  POST /groups/{group}/reset  /topics  /topics/{topic}  /cluster
    /login  POST /logout  /events?view=PAGE (server-sent events)  /static/...
    /api/groups  /api/groups/{group}  /api/groups/{group}/rebalances
    /api/groups/{group}/lag?since=ISO8601  /api/topics  /api/topics/{topic}
    /api/topics/{topic}/messages?partition=P&offset=O&limit=N  /api/cluster
    /api/session (the CSRF token for scripts)  POST /api/groups/{group}/reset

Every response carries a Content-Security-Policy that allows only the console's own
scripts and styles (served from the package: no CDN, works air-gapped), no inline code,
no framing. Mutations need the session's CSRF token. Where a login is required (any
non-loopback address), everything but /login and /static needs a signed-in session.

``serve_console`` runs the app on an asyncio loop it does not own: ``odradek console``
gives it one, ``odradek serve --console`` the broker's (AppRunner and TCPSite install no
signal handlers, so the broker keeps its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from aiohttp import web

from odradek.console import pages, views
from odradek.console.auth import COOKIE, Session, Sessions, check_password, csrf_ok
from odradek.console.lagstore import RETENTION_MS
from odradek.console.service import ConsoleError, ConsoleService
from odradek.offset_reset import ResetError, ResetTarget, parse_datetime

log = logging.getLogger("odradek.console")

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
LIVE_TICK_S = 1.0
LIVE_REFRESH_S = 5.0  # pages whose regions ask the cluster re-render at most this often
LIVE_MIN_INTERVAL_S = 1.0  # and a page re-renders at most this often, whatever changes
KEEPALIVE_S = 15.0
MAX_EVENT_STREAMS = 200
LOGIN_FAILURE_DELAY_S = 0.5
STATIC_CACHE = "max-age=300"
WORKERS = 4  # threads for the calls a page makes to the cluster
VERDICTS_SHOWN = 500  # partitions in a group page's verdict table

SERVICE = web.AppKey("service", ConsoleService)
SETTINGS = web.AppKey("settings", dict)
SESSIONS = web.AppKey("sessions", Sessions)
STREAMS = web.AppKey("streams", set)


@dataclass
class Ctx:
    service: ConsoleService
    session: Session | None
    read_only: bool
    live: bool = False  # rendering for the event stream: skip what is not live


Params = Mapping[str, str]
PageFn = Callable[[Ctx, Params, Params], Awaitable[pages.Page]]


_executor: ThreadPoolExecutor | None = None


async def blocking(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a blocking call (Odradek's client) in one of the console's own threads: not
    the loop's default executor, which a broker running the console uses itself."""
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="odradek-console")
    return await asyncio.get_running_loop().run_in_executor(_executor, partial(fn, *args, **kwargs))


def _int(value: str | None, default: int, *, name: str) -> int:
    if value in (None, ""):
        return default
    try:
        return int(str(value).replace("_", ""))
    except ValueError:
        raise ConsoleError(f"{name} expects a whole number, got {value!r}") from None


def _since(query: Params, now_ms: int) -> int:
    text = query.get("since")
    if text:
        try:
            return parse_datetime(text)
        except ResetError as exc:
            raise ConsoleError(f"since: {exc}") from None
    window = query.get("window") or "1h"
    seconds = dict(pages.LAG_WINDOWS).get(window, 3600)
    return max(now_ms - seconds * 1000, now_ms - RETENTION_MS)


# --- views shared by the pages and the API ---------------------------------------------------


async def _group(ctx: Ctx, group_id: str) -> Any:
    service = ctx.service
    service.poller.viewed(group_id)
    g = service.model.group(group_id)
    if g is None and not ctx.live:
        if not await blocking(service.describe_group, group_id):
            raise ConsoleError(f"group '{group_id}' does not exist", 404)
        g = service.model.group(group_id)
    if g is None:
        raise ConsoleError(f"group '{group_id}' does not exist", 404)
    return g


def _groups_params(query: Params) -> dict[str, Any]:
    return {
        "query": query.get("q", "").strip(),
        "sort": query.get("sort", "group"),
        "order": query.get("order", "asc"),
        "page": max(_int(query.get("page"), 1, name="page"), 1),
        "size": _int(query.get("size"), views.DEFAULT_PAGE_SIZE, name="size"),
    }


# --- pages -----------------------------------------------------------------------------------


async def groups_html(ctx: Ctx, match: Params, query: Params) -> pages.Page:
    return pages.groups_page(views.groups_view(ctx.service.model, **_groups_params(query)))


async def group_html(ctx: Ctx, match: Params, query: Params) -> pages.Page:
    g = await _group(ctx, match["group"])
    model = ctx.service.model
    since = _since(query, model.now_ms())
    lag = await blocking(
        views.lag_view,
        model,
        ctx.service.store,
        g,
        since,
        partitions=False,
        partition=query.get("partition") or None,
        verdicts=VERDICTS_SHOWN,
    )
    return pages.group_page(
        views.group_view(model, g, partitions=pages.partitions_page(dict(query))),
        views.rebalances_view(model, g),
        lag,
        params=dict(query),
        csrf=ctx.session.csrf if ctx.session else None,
        read_only=ctx.read_only,
    )


async def topics_html(ctx: Ctx, match: Params, query: Params) -> pages.Page:
    return pages.topics_page(views.topics_view(ctx.service.model))


def _message_args(query: Params) -> dict[str, Any]:
    args: dict[str, Any] = {
        "partition": _int(query.get("partition"), 0, name="partition"),
        "limit": _int(query.get("limit"), 20, name="limit"),
        "fmt": query.get("format", "text"),
    }
    if query.get("timestamp"):
        try:
            args["timestamp_ms"] = parse_datetime(query["timestamp"])
        except ResetError as exc:
            raise ConsoleError(f"timestamp: {exc}") from None
    elif query.get("offset"):
        args["offset"] = _int(query.get("offset"), 0, name="offset")
    if query.get("max_bytes"):
        args["max_bytes"] = _int(query.get("max_bytes"), 0, name="max_bytes")
    return args


async def topic_html(ctx: Ctx, match: Params, query: Params) -> pages.Page:
    name = match["topic"]
    view = await blocking(ctx.service.topic, name)
    messages, error = None, None
    if query.get("browse") and not ctx.live:
        try:
            messages = await blocking(ctx.service.messages, name, **_message_args(query))
        except ConsoleError as exc:
            error = str(exc)
    return pages.topic_page(view, messages, dict(query), error)


async def cluster_html(ctx: Ctx, match: Params, query: Params) -> pages.Page:
    access = None if ctx.live else await blocking(ctx.service.access)
    return pages.cluster_page(views.cluster_view(ctx.service.model), access)


def _group_version(model: Any, match: Params) -> int | None:
    g = model.group(match.get("group", ""))
    return g.version if g is not None else model.version


# Pages by path, for the routes and for the event stream (which renders them again when
# what they show changed: the version its function gives; None: every LIVE_REFRESH_S,
# for a page whose live part asks the cluster).
VersionFn = Callable[[Any, Params], int | None]
PAGES: list[tuple[re.Pattern[str], PageFn, VersionFn]] = [
    (re.compile(r"^/groups$"), groups_html, lambda model, match: model.version),
    (re.compile(r"^/groups/(?P<group>[^/]+)$"), group_html, _group_version),
    (re.compile(r"^/topics$"), topics_html, lambda model, match: model.cluster_version),
    (re.compile(r"^/topics/(?P<topic>[^/]+)$"), topic_html, lambda model, match: None),
    (re.compile(r"^/cluster$"), cluster_html, lambda model, match: model.cluster_version),
]


def _live_page(path: str) -> tuple[re.Match[str], PageFn, VersionFn] | None:
    for pattern, fn, version in PAGES:
        match = pattern.match(path)
        if match is not None:
            return match, fn, version
    return None


def _ctx(request: web.Request, *, live: bool = False) -> Ctx:
    return Ctx(
        request.app[SERVICE],
        request.get("session"),
        request.app[SETTINGS]["read_only"],
        live,
    )


def _render(request: web.Request, page: pages.Page, version: int | None = None) -> web.Response:
    """The page in the layout; ``version``: what the page shows is as of this model
    version (its event stream sends nothing until that changes)."""
    session: Session | None = request.get("session")
    live = (
        page.status == 200
        and request.method == "GET"
        and _live_page(request.rel_url.raw_path) is not None
    )
    html = pages.layout(
        page,
        view=request.rel_url.raw_path_qs,
        user=session.user if session else None,
        csrf=session.csrf if session else None,
        read_only=request.app[SETTINGS]["read_only"],
        live_updates=bool(live),
        version=version,
    )
    return web.Response(text=html, content_type="text/html", status=page.status)


def html_route(fn: PageFn) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handler(request: web.Request) -> web.StreamResponse:
        found = _live_page(request.rel_url.raw_path)
        model = request.app[SERVICE].model
        version = found[2](model, request.match_info) if found else None  # before rendering
        try:
            page = await fn(_ctx(request), request.match_info, request.query)
        except ConsoleError as exc:
            page = pages.error_page(exc.status, str(exc))
        return _render(request, page, version)

    return handler


# --- the event stream -------------------------------------------------------------------------


async def events(request: web.Request) -> web.StreamResponse:
    """Server-sent events for one page: its live regions, whenever they change."""
    view = request.query.get("view", "/groups")
    parts = urlsplit(view)
    found = _live_page(parts.path)
    if found is None:
        raise web.HTTPBadRequest(text=f"no live page at {view!r}")
    match, fn, version_of = found
    streams = request.app[STREAMS]
    if len(streams) >= MAX_EVENT_STREAMS:
        raise web.HTTPServiceUnavailable(text="too many open pages")
    match_info = {k: unquote(v) for k, v in match.groupdict().items()}
    query = dict(parse_qsl(parts.query))
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        }
    )
    task = asyncio.current_task()
    streams.add(task)
    model = request.app[SERVICE].model
    sent: dict[str, str] = {}
    # The page was rendered at this version: nothing to send before it changes.
    try:
        seen_version: int | None = _int(request.query.get("v"), -1, name="v")
    except ConsoleError:
        seen_version = -1
    rendered_at = time.monotonic() if seen_version != -1 else 0.0
    last_write = time.monotonic()
    try:
        await response.prepare(request)
        while True:
            now = time.monotonic()
            version = version_of(model, match_info)
            if version is None:
                due = now - rendered_at >= LIVE_REFRESH_S
            else:
                due = version != seen_version and now - rendered_at >= LIVE_MIN_INTERVAL_S
            if due:
                seen_version = version
                rendered_at = now
                try:
                    page = await fn(_ctx(request, live=True), match_info, query)
                except ConsoleError as exc:
                    await response.write(_sse("gone", str(exc)))
                    break
                changed = []
                for region, html in page.live().items():
                    digest = hashlib.blake2b(html.encode(), digest_size=16).hexdigest()
                    if sent.get(region) != digest:
                        sent[region] = digest
                        changed.append({"id": region, "html": html})
                if changed:
                    await response.write(_sse("patch", json.dumps(changed)))
                    last_write = now
            if now - last_write >= KEEPALIVE_S:
                await response.write(b": keepalive\n\n")
                last_write = now
            await asyncio.sleep(LIVE_TICK_S)
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        streams.discard(task)
    return response


def _sse(event: str, data: str) -> bytes:
    lines = "".join(f"data: {line}\n" for line in data.splitlines() or [""])
    return f"event: {event}\n{lines}\n".encode()


# --- mutations --------------------------------------------------------------------------------


def _reset_target(kind: str, value: str | None) -> ResetTarget:
    value = (value or "").strip()
    try:
        if kind in ("earliest", "latest"):
            return ResetTarget(kind)  # type: ignore[arg-type]
        if kind == "datetime":
            return ResetTarget("datetime", parse_datetime(value))
        if kind in ("offset", "shift"):
            if not value:
                raise ConsoleError(f"a reset to {kind} needs a value")
            return ResetTarget(kind, _int(value, 0, name="value"))  # type: ignore[arg-type]
        return ResetTarget(kind)  # type: ignore[arg-type]
    except ResetError as exc:
        raise ConsoleError(str(exc)) from None


def _scope(specs: list[str]) -> dict[str, list[int] | None] | None:
    from odradek.cli.errors import CliError
    from odradek.cli.groups import parse_scope

    specs = [s for s in specs if s.strip()]
    if not specs:
        return None
    try:
        return parse_scope(specs)
    except CliError as exc:
        raise ConsoleError(str(exc).replace("--topic expects", "topics are")) from None


async def reset_html(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    fields = {k: str(v) for k, v in form.items()}
    group = request.match_info["group"]
    try:
        target = _reset_target(fields.get("target", ""), fields.get("value"))
        scope = _scope(re.split(r"[\s;]+", fields.get("topics", "")))
        result = await blocking(
            request.app[SERVICE].reset,
            group,
            target,
            scope,
            execute=fields.get("execute") == "1",
        )
    except ConsoleError as exc:
        return _render(request, pages.error_page(exc.status, str(exc), "groups"))
    session = request.get("session")
    page = pages.reset_page(
        result, fields, session.csrf if session else None, request.app[SETTINGS]["read_only"]
    )
    return _render(request, page)


# --- the JSON API -----------------------------------------------------------------------------


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=partial(json.dumps, default=str))


def api_route(
    fn: Callable[[Ctx, web.Request], Awaitable[Any]],
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handler(request: web.Request) -> web.StreamResponse:
        try:
            return _json(await fn(_ctx(request), request))
        except ConsoleError as exc:
            return _json({"error": str(exc)}, exc.status)

    return handler


async def api_groups(ctx: Ctx, request: web.Request) -> Any:
    return views.groups_view(ctx.service.model, **_groups_params(request.query))


async def api_group(ctx: Ctx, request: web.Request) -> Any:
    g = await _group(ctx, request.match_info["group"])
    return views.group_view(ctx.service.model, g)


async def api_rebalances(ctx: Ctx, request: web.Request) -> Any:
    g = await _group(ctx, request.match_info["group"])
    return views.rebalances_view(ctx.service.model, g)


async def api_lag(ctx: Ctx, request: web.Request) -> Any:
    g = await _group(ctx, request.match_info["group"])
    model = ctx.service.model
    since = _since(request.query, model.now_ms())
    return await blocking(
        views.lag_view,
        model,
        ctx.service.store,
        g,
        since,
        partitions=request.query.get("partitions", "1") != "0",
        partition=request.query.get("partition") or None,
    )


async def api_topics(ctx: Ctx, request: web.Request) -> Any:
    return views.topics_view(ctx.service.model)


async def api_topic(ctx: Ctx, request: web.Request) -> Any:
    return await blocking(ctx.service.topic, request.match_info["topic"])


async def api_messages(ctx: Ctx, request: web.Request) -> Any:
    args = _message_args(request.query)
    return await blocking(ctx.service.messages, request.match_info["topic"], **args)


async def api_cluster(ctx: Ctx, request: web.Request) -> Any:
    view = views.cluster_view(ctx.service.model)
    view["access"] = await blocking(ctx.service.access)
    return view


async def api_session(ctx: Ctx, request: web.Request) -> Any:
    session = ctx.session
    return {
        "user": session.user if session else None,
        "csrf": session.csrf if session else None,
        "read_only": ctx.read_only,
    }


async def api_reset(ctx: Ctx, request: web.Request) -> Any:
    try:
        body = await request.json()
    except ValueError:
        raise ConsoleError("the body must be JSON") from None
    if not isinstance(body, dict):
        raise ConsoleError("the body must be a JSON object")
    topics = body.get("topics") or []
    if not isinstance(topics, list):
        raise ConsoleError('"topics" is a list like ["orders", "audit:0,2"]')
    target = _reset_target(
        str(body.get("target", "")), None if body.get("value") is None else str(body.get("value"))
    )
    return await blocking(
        ctx.service.reset,
        request.match_info["group"],
        target,
        _scope([str(t) for t in topics]),
        execute=bool(body.get("execute")),
    )


# --- login ---------------------------------------------------------------------------------


def _safe_next(url: str | None) -> str:
    if not url or not url.startswith("/") or url.startswith("//") or "\\" in url:
        return "/groups"
    return url


def _set_cookie(request: web.Request, response: web.StreamResponse, session: Session) -> None:
    response.set_cookie(
        COOKIE,
        session.token,
        httponly=True,
        samesite="Strict",
        secure=request.secure,
        path="/",
    )


async def login_get(request: web.Request) -> web.StreamResponse:
    session = request.get("session")
    page = pages.login_page(None, session.csrf, _safe_next(request.query.get("next")))
    return _render(request, page)


async def login_post(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    users: dict[str, str] = request.app[SETTINGS]["users"] or {}
    name = str(form.get("username", ""))
    password = str(form.get("password", ""))
    stored = users.get(name)
    ok = stored is not None and await blocking(check_password, password, stored)
    session: Session = request["session"]
    if not ok:
        await asyncio.sleep(LOGIN_FAILURE_DELAY_S)
        page = pages.login_page(
            "Wrong user or password.", session.csrf, _safe_next(str(form.get("next", "")))
        )
        return _render(request, page)  # 200: the form again, with what went wrong
    sessions = request.app[SESSIONS]
    sessions.drop(session.token)  # a new session id on login: no fixation
    fresh = sessions.new(name)
    response = web.HTTPSeeOther(_safe_next(str(form.get("next", ""))))
    _set_cookie(request, response, fresh)
    log.info("console: %s signed in from %s", name, request.remote)
    raise response


async def logout(request: web.Request) -> web.StreamResponse:
    session = request.get("session")
    if session is not None:
        request.app[SESSIONS].drop(session.token)
    response = web.HTTPSeeOther("/login")
    response.del_cookie(COOKIE, path="/")
    raise response


# --- middlewares ------------------------------------------------------------------------------


OPEN_PATHS = ("/login", "/static/", "/favicon.ico")


@web.middleware
async def security_headers(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        response = exc
        _headers(response)
        raise
    if request.path.startswith("/static/") and not response.prepared:
        # The package's own files: cached a while (revalidated by their ETag after).
        response.headers["Cache-Control"] = STATIC_CACHE
    _headers(response)
    return response


def _headers(response: web.StreamResponse) -> None:
    if response.prepared:
        return
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers.setdefault("Cache-Control", "no-store")


@web.middleware
async def sessions_and_csrf(request: web.Request, handler: Any) -> web.StreamResponse:
    """Find the visitor's session (or start one for a page), require a login where one is
    needed, and the CSRF token on every mutation."""
    sessions = request.app[SESSIONS]
    settings = request.app[SETTINGS]
    session = sessions.get(request.cookies.get(COOKIE))
    is_static = request.path.startswith("/static/")
    new_session = None
    if session is None and not is_static and not request.path.startswith(("/api/", "/events")):
        session = new_session = sessions.new()
    if session is None and request.path == "/api/session":
        session = new_session = sessions.new()
    request["session"] = session
    signed_in = session is not None and session.user is not None
    if settings["require_login"] and not request.path.startswith(OPEN_PATHS) and not signed_in:
        if request.path.startswith(("/api/", "/events")):
            return _json({"error": "sign in first (POST /login)"}, 401)
        back = quote(request.path_qs if request.method == "GET" else "/groups", safe="")
        response: web.StreamResponse = web.HTTPSeeOther(f"/login?next={back}")
        if new_session is not None:
            _set_cookie(request, response, new_session)
        raise response
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        token = request.headers.get("X-CSRF-Token")
        if token is None and request.content_type in (
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ):
            token = str((await request.post()).get("csrf", ""))
        if not csrf_ok(session, token):
            if request.path.startswith("/api/"):
                return _json({"error": "missing or wrong CSRF token (X-CSRF-Token)"}, 403)
            page = pages.error_page(
                403, "This form expired or did not come from this console: reload the page."
            )
            return _render(request, page)
        if settings["read_only"] and request.path not in ("/login", "/logout"):
            if request.path.startswith("/api/"):
                return _json({"error": "this console is read-only (--read-only)"}, 403)
            return _render(request, pages.error_page(403, "This console is read-only."))
    response = await handler(request)
    if new_session is not None:
        _set_cookie(request, response, new_session)
    return response


async def index(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/groups")


async def favicon(request: web.Request) -> web.StreamResponse:
    return web.Response(status=204)


async def _close_streams(app: web.Application) -> None:
    for task in list(app[STREAMS]):
        task.cancel()


def create_app(
    service: ConsoleService,
    *,
    users: dict[str, str] | None = None,
    require_login: bool = False,
    read_only: bool = False,
) -> web.Application:
    app = web.Application(
        middlewares=[security_headers, sessions_and_csrf], client_max_size=64 * 1024
    )
    app[SERVICE] = service
    app[SETTINGS] = {"users": users, "require_login": require_login, "read_only": read_only}
    app[SESSIONS] = Sessions()
    app[STREAMS] = set()
    app.on_shutdown.append(_close_streams)
    static = resources.files("odradek.console") / "static"
    r = app.router
    r.add_get("/", index)
    r.add_get("/favicon.ico", favicon)
    for path, fn in (
        ("/groups", groups_html),
        ("/groups/{group}", group_html),
        ("/topics", topics_html),
        ("/topics/{topic}", topic_html),
        ("/cluster", cluster_html),
    ):
        r.add_get(path, html_route(fn))
    r.add_post("/groups/{group}/reset", reset_html)
    r.add_get("/events", events)
    r.add_get("/login", login_get)
    r.add_post("/login", login_post)
    r.add_post("/logout", logout)
    r.add_static("/static/", str(static), append_version=False)
    for path, api in (
        ("/api/groups", api_groups),
        ("/api/groups/{group}", api_group),
        ("/api/groups/{group}/rebalances", api_rebalances),
        ("/api/groups/{group}/lag", api_lag),
        ("/api/topics", api_topics),
        ("/api/topics/{topic}", api_topic),
        ("/api/topics/{topic}/messages", api_messages),
        ("/api/cluster", api_cluster),
        ("/api/session", api_session),
    ):
        r.add_get(path, api_route(api))
    r.add_post("/api/groups/{group}/reset", api_route(api_reset))
    return app


class ConsoleServer:
    """The console's web server on the running loop, and its service."""

    def __init__(self, service: ConsoleService, app: web.Application) -> None:
        self.service = service
        self.app = app
        self.runner: web.AppRunner | None = None
        self.port: int | None = None
        self._stopping: asyncio.Future[None] | None = None
        self._waiter: asyncio.Future[None] | None = None

    async def start(self, host: str, port: int) -> None:
        self.service.start()
        self.runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, host, port, reuse_address=True)
        await site.start()
        addresses = self.runner.addresses
        if addresses:
            self.port = int(addresses[0][1])
        log.info("console: serving on http://%s:%s", host, self.port or port)

    async def stop(self) -> None:
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop())
        await asyncio.shield(self._stopping)

    async def _stop(self) -> None:
        if self.runner is not None:
            with contextlib.suppress(Exception):
                await self.runner.cleanup()
        await blocking(self.service.close)

    def stopped_first(self, stop: asyncio.Event) -> asyncio.Event:
        """An event set once ``stop`` is set and the console has stopped: what a broker
        serving the console waits for, so that the console's clients end while the
        broker still answers them."""
        done = asyncio.Event()

        async def wait() -> None:
            await stop.wait()
            await self.stop()
            done.set()

        self._waiter = asyncio.ensure_future(wait())
        return done
