"""The control API of ``weaveplace serve``: HTTP/JSON on 127.0.0.1, bearer-token auth.

Why the standard library's ``ThreadingHTTPServer``: a handful of JSON commands from one operator
need no framework, and a command that waits for the micro-batch in progress must not block
``status`` (one thread per request).  Only 127.0.0.1 is bound: the token in ``control.json``
(mode 0600) is the access control on a shared machine, the loopback address keeps the port off
the network (tunnel it with ssh to reach it from elsewhere).

Every request carries the token: ``Authorization: Bearer <token>`` (commands), or for the page
``GET /?token=<token>`` (which sets a cookie, so the page's own refreshes need nothing).
Missing or wrong token: 401.  A refused command: 4xx with ``{"error": "<one line>"}``; the
deployment is unchanged.  A body above ``MAX_BODY``: 413 with the limit (the body is read and
dropped first, so the client gets the reply, not a broken pipe).

Routes: ``GET /status``; ``POST /add-queries`` ``{"queries": [...]}``; ``POST /remove-queries``
``{"ids": [...]}``; ``POST /add-node`` ``{"id", "capacity"}``; ``POST /retire-node`` ``{"id"}``;
``POST /rebalance``; ``POST /autoscale`` ``{"on": bool}``; ``POST /stop``; ``GET /`` the load page (``cluster.service.load_page``)
and ``GET /history`` its plots' data; ``GET /metrics`` Prometheus metrics
(``cluster.service.prometheus``).

The requests are checked here (``parse_*``: a malformed one is refused with 400 before any
command runs); the commands (``cluster.service.service``) refuse with a kind of
``cluster.service.refusals.CommandRefused`` and ``HTTP_STATUS`` turns it into the reply's code.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from cluster.runtime import collector
from cluster.service.refusals import (
    CommandRefused,
    Conflict,
    InternalError,
    InvalidRequest,
    NotFound,
    Unavailable,
)
from placement.messages import one_line as one_line_text
from placement.messages import short_repr

#: the largest request body read (bytes); a larger one is refused with 413 after it is read
#: and dropped, up to ``MAX_DRAIN`` bytes (beyond that the connection is closed unread)
MAX_BODY = 8 << 20
MAX_DRAIN = 1 << 30
DRAIN_TIMEOUT_S = 10.0


HTTP_STATUS = {
    InvalidRequest: 400,
    NotFound: 404,
    Conflict: 409,
    InternalError: 500,
    Unavailable: 503,
}


def http_status(e: CommandRefused) -> int:
    """The reply's HTTP code for a refusal (400 for a kind without one of its own)."""
    return next((code for kind, code in HTTP_STATUS.items() if isinstance(e, kind)), 400)


def one_line(e: BaseException) -> str:
    """An exception's message on one line without surrounding quotes (a ``KeyError``'s key
    comes quoted): the form of every refusal and status error."""
    return one_line_text(e).strip("'\"")


# -- requests: what each command's body must be (400 when it is not) --------------------------
def parse_new_queries(body: Any, check_id: Callable[[str], None]) -> list:
    """``add-queries``'s queries (``placement.queries.Query``): a list of query mappings, the
    schema of config ``workload.queries`` (or ``{"queries": [...]}``), time or count windows on
    DEBS columns with known aggregates and ids unique in the request.  ``check_id(id)`` refuses an
    id the deployment has (``Conflict``), query by query in the request's order, so the first
    wrong query is the one reported."""
    from cluster.debs.format import VALUE_COLUMNS
    from executors.aggregates import get_aggregate
    from placement.queries import QueryError, query_from_mapping

    if isinstance(body, dict) and "queries" in body:
        body = body["queries"]
    if not isinstance(body, list) or not body:
        raise InvalidRequest(
            "add-queries: expected a non-empty list of queries "
            "(the schema of config workload.queries)"
        )
    qs, seen = [], set()
    for i, r in enumerate(body):
        try:
            q = query_from_mapping(r, i)
            get_aggregate(q.aggregate)
        except (QueryError, ValueError, TypeError, KeyError) as e:
            raise InvalidRequest(f"add-queries: {one_line(e)}") from None
        if q.stream not in VALUE_COLUMNS or q.stream == "index":
            raise InvalidRequest(
                f"add-queries: queries[{i}] ({short_repr(q.id)}): stream "
                f"{short_repr(q.stream)} is not a DEBS column (e.g. mf01, mf02)"
            )
        if q.id in seen:
            raise InvalidRequest(
                f"add-queries: duplicate query id {short_repr(q.id)} in the request"
            )
        check_id(q.id)
        seen.add(q.id)
        qs.append(q)
    return qs


def parse_query_ids(body: Any) -> list[str]:
    """``remove-queries``'s ids: a non-empty list of distinct strings (or ``{"ids": [...]}``)."""
    if isinstance(body, dict) and "ids" in body:
        body = body["ids"]
    if not isinstance(body, list) or not body or not all(isinstance(i, str) for i in body):
        raise InvalidRequest("remove-queries: expected a non-empty list of query ids")
    if len(set(body)) != len(body):
        raise InvalidRequest(f"remove-queries: duplicate ids in the request: {short_repr(body)}")
    return body


def parse_node(body: Any, cmd: str, need_id: bool = False) -> tuple[str | None, float | None]:
    """``add-node`` / ``retire-node``'s ``(id, capacity)``: a non-empty string id (required
    with ``need_id``) and a capacity > 0, both optional otherwise."""
    if not isinstance(body, dict):
        raise InvalidRequest(f"{cmd}: expected a JSON object")
    nid, cap = body.get("id"), body.get("capacity")
    if nid is not None and (not isinstance(nid, str) or not nid):
        raise InvalidRequest(f"{cmd}: id {short_repr(nid)}; expected a non-empty string")
    if need_id and nid is None:
        raise InvalidRequest(f"{cmd}: the node id is required")
    if cap is not None and (
        isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap > 0
    ):
        raise InvalidRequest(f"{cmd}: capacity {short_repr(cap)}; expected a number > 0")
    return nid, (None if cap is None else float(cap))


def parse_autoscale(body: Any) -> bool:
    """``autoscale``'s switch: ``{"on": true}`` or ``{"on": false}``."""
    on = body.get("on") if isinstance(body, dict) else None
    if not isinstance(on, bool):
        raise InvalidRequest('autoscale: expected {"on": true} or {"on": false}')
    return on


def parse_stop(body: Any) -> bool:
    """``stop``'s ``flush``: true only when the body says so."""
    return bool((body or {}).get("flush")) if isinstance(body, dict) else False


class ControlServer:
    """Serves ``service``'s commands on 127.0.0.1:``port`` (0: any free port)."""

    def __init__(self, service, port: int = 0, token: str | None = None):
        self.service = service
        self.token = token or secrets.token_urlsafe(32)
        handler = _handler_for(self)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", int(port)), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="weaveplace-control", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def write_file(self, path: Path) -> None:
        """``control.json``: address and token, readable by its owner only (0600)."""
        text = json.dumps(
            {
                "url": self.url,
                "host": "127.0.0.1",
                "port": self.port,
                "token": self.token,
                "pid": os.getpid(),
            }
        )
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)

    # -- dispatch -----------------------------------------------------------------------------
    def dispatch(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        s = self.service
        routes = {
            ("GET", "/status"): lambda: s.status(),
            ("POST", "/add-queries"): lambda: s.add_queries(
                parse_new_queries(body, s.check_new_query_id)
            ),
            ("POST", "/remove-queries"): lambda: s.remove_queries(parse_query_ids(body)),
            ("POST", "/add-node"): lambda: s.add_node(*parse_node(body or {}, "add-node")),
            ("POST", "/retire-node"): lambda: s.retire_node(
                parse_node(body or {}, "retire-node", need_id=True)[0]
            ),
            ("POST", "/rebalance"): lambda: s.rebalance(),
            ("POST", "/autoscale"): lambda: s.set_autoscale(parse_autoscale(body)),
            ("POST", "/stop"): lambda: s.request_stop(parse_stop(body)),
        }
        fn = routes.get((method, path))
        if fn is None:
            known = sorted({p for _, p in routes})
            return 404, {"error": f"unknown command {method} {path}; known: {', '.join(known)}"}
        try:
            return 200, fn()
        except CommandRefused as e:
            return http_status(e), {"error": one_line_text(e.message)}
        except Exception as e:  # a bug or a cluster failure: one line, the service goes on
            return 500, {"error": f"{path[1:]}: {type(e).__name__}: {one_line_text(str(e))}"}


def _handler_for(server: ControlServer):
    class Handler(BaseHTTPRequestHandler):
        server_version = "weaveplace"

        def log_message(self, fmt, *args):  # quiet: events.jsonl is the log
            pass

        def _authorised(self, allow_query: bool) -> bool:
            token = server.token
            h = self.headers.get("Authorization", "")
            if h.startswith("Bearer ") and hmac.compare_digest(h[7:].strip(), token):
                return True
            if allow_query:
                q = parse_qs(urlparse(self.path).query).get("token", [""])[0]
                if q and hmac.compare_digest(q, token):
                    return True
                c = SimpleCookie(self.headers.get("Cookie", ""))
                if "weaveplace_token" in c and hmac.compare_digest(
                    c["weaveplace_token"].value, token
                ):
                    return True
            return False

        def _send(self, code: int, obj: Any, ctype="application/json", extra=()):
            data = obj if isinstance(obj, bytes) else json.dumps(obj, default=_jsonable).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            for k, v in extra:
                self.send_header(k, v)
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting
                pass

        def do_GET(self):
            path = urlparse(self.path).path
            page = path in ("/", "/index.html")
            if not self._authorised(allow_query=page or path in ("/status", "/history")):
                return self._send(401, {"error": "missing or wrong token (see control.json)"})
            if path == "/metrics":  # Prometheus: bearer token (a scrape config's authorization)
                from cluster.service.prometheus import CONTENT_TYPE, exposition

                try:
                    return self._send(200, exposition(server.service.status), CONTENT_TYPE)
                except Exception as e:  # a failed scrape, one line; the service goes on
                    return self._send(500, {"error": f"metrics: {one_line_text(e)}"})
            if path == "/history":  # the load page's plots (cluster.service.load_history)
                import time

                return self._send(200, server.service.load_history.series(time.time()))
            if page:
                from cluster.service.load_page import render_page

                q = parse_qs(urlparse(self.path).query).get("token", [""])[0]
                extra = (
                    [
                        (
                            "Set-Cookie",
                            f"weaveplace_token={server.token}; HttpOnly; SameSite=Strict; Path=/",
                        )
                    ]
                    if q
                    else []
                )
                return self._send(
                    200, render_page(server.service).encode(), "text/html; charset=utf-8", extra
                )
            code, obj = server.dispatch("GET", path, None)
            self._send(code, obj)

        def _read_body(self) -> tuple[bytes, tuple[int, dict] | None]:
            """The request body, or the refusal to send instead: 400 for a Content-Length that is
            not a count, 413 for a body above ``MAX_BODY``.  An oversized body is read and
            dropped first (up to ``MAX_DRAIN``, each read within ``DRAIN_TIMEOUT_S``): a client
            sends its whole body before it reads the reply, and a reply sent over an unread
            body would reach it as a broken pipe or a reset connection, not as the 413."""
            length = (self.headers.get("Content-Length") or "0").strip()
            if not (length.isascii() and length.isdigit()):
                self.close_connection = True
                return b"", (400, {"error": f"Content-Length {short_repr(length)}: not a count"})
            n = int(length)
            if n <= MAX_BODY:
                return (self.rfile.read(n) if n else b""), None
            self.close_connection = True
            left = n if n <= MAX_DRAIN else 0
            self.connection.settimeout(DRAIN_TIMEOUT_S)
            try:
                while left > 0:
                    chunk = self.rfile.read(min(left, 1 << 16))
                    if not chunk:
                        break
                    left -= len(chunk)
            except OSError:  # the client stopped sending: the reply may still reach it
                pass
            mib = f"{n / (1 << 20):.1f} MiB"
            return b"", (
                413,
                {"error": f"request body of {mib} above the limit of {MAX_BODY >> 20} MiB"},
            )

        def do_POST(self):
            path = urlparse(self.path).path
            if not self._authorised(allow_query=False):
                return self._send(401, {"error": "missing or wrong token (see control.json)"})
            raw, refused = self._read_body()
            if refused is not None:
                return self._send(*refused, extra=[("Connection", "close")])
            try:
                body = json.loads(raw) if raw.strip() else None
            except (ValueError, UnicodeDecodeError) as e:
                return self._send(400, {"error": f"malformed JSON: {one_line_text(str(e))}"})
            with collector.paused():  # the reply's writing too (cluster.runtime.collector)
                code, obj = server.dispatch("POST", path, body)
                self._send(code, obj)

    return Handler


def _jsonable(x):
    if hasattr(x, "item"):
        return x.item()
    return str(x)


# -- client (weaveplace ctl) ------------------------------------------------------------------
class ControlError(Exception):
    """A command refused or not delivered: a one-line message for the user."""


def read_control(run_dir: str | Path) -> dict:
    p = Path(run_dir) / "control.json"
    if not p.is_file():
        raise ControlError(
            f"{p}: not found; is `weaveplace serve` running with this run "
            "directory (run.output_dir)?"
        )
    try:
        return json.loads(p.read_text())
    except ValueError as e:
        raise ControlError(f"{p}: not valid JSON ({e})") from None


def call(
    run_dir: str | Path, method: str, path: str, body: Any = None, timeout: float = 120.0
) -> Any:
    """Send one command to the deployment of ``run_dir``; returns the JSON reply or raises
    ``ControlError`` with the deployment's one-line message."""
    c = read_control(run_dir)
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        c["url"] + path,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {c['token']}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        try:
            msg = json.loads(e.read()).get("error")
        except ValueError:
            msg = None
        raise ControlError(f"{msg or e.reason} (HTTP {e.code})") from None
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            raise ControlError(
                f"no reply within {timeout:g} s from {c['url']} to {method} {path}; the "
                "deployment is running but its control API did not answer (see its "
                "events.jsonl, or try again with a longer --timeout)"
            ) from None
        raise ControlError(
            f"no deployment answering at {c['url']} ({reason}); is it running?"
        ) from None
