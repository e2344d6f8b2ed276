"""The control API of ``weaveplace serve``: HTTP/JSON on 127.0.0.1, bearer-token auth.

Why the standard library's ``ThreadingHTTPServer``: a handful of JSON commands from one operator
need no framework, and a command that waits for the micro-batch in progress must not block
``status`` (one thread per request).  Only 127.0.0.1 is bound: the token in ``control.json``
(mode 0600) is the access control on a shared machine, the loopback address keeps the port off
the network (tunnel it with ssh to reach it from elsewhere).

Every request carries the token: ``Authorization: Bearer <token>`` (commands), or for the page
``GET /?token=<token>`` (which sets a cookie, so the page's own refreshes need nothing).
Missing or wrong token: 401.  A refused command: 4xx with ``{"error": "<one line>"}``; the
deployment is unchanged.

Routes: ``GET /status``; ``POST /add-queries`` ``{"queries": [...]}``; ``POST /remove-queries``
``{"ids": [...]}``; ``POST /add-node`` ``{"id", "capacity"}``; ``POST /retire-node`` ``{"id"}``;
``POST /rebalance``; ``POST /stop``; ``GET /`` the live load page.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import threading
import urllib.error
import urllib.request
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from placement.messages import one_line as one_line_text

MAX_BODY = 8 << 20


class ServiceError(Exception):
    """A refused command: HTTP ``status`` and a one-line message; nothing was changed.

    Defined with the control API that turns it into a response, so the service depends on its
    API and not the other way round."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def one_line(e: BaseException) -> str:
    """An exception's message on one line without surrounding quotes (a ``KeyError``'s key
    comes quoted): the form of every refusal and status error."""
    return one_line_text(e).strip("'\"")


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
            ("POST", "/add-queries"): lambda: s.add_queries(body),
            ("POST", "/remove-queries"): lambda: s.remove_queries(body),
            ("POST", "/add-node"): lambda: s.add_node(body or {}),
            ("POST", "/retire-node"): lambda: s.retire_node(body or {}),
            ("POST", "/rebalance"): lambda: s.rebalance(body or {}),
            ("POST", "/stop"): lambda: s.request_stop(body),
        }
        fn = routes.get((method, path))
        if fn is None:
            known = sorted({p for _, p in routes})
            return 404, {"error": f"unknown command {method} {path}; known: {', '.join(known)}"}
        try:
            return 200, fn()
        except ServiceError as e:
            return e.status, {"error": e.message}
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
            if not self._authorised(allow_query=page or path == "/status"):
                return self._send(401, {"error": "missing or wrong token (see control.json)"})
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

        def do_POST(self):
            path = urlparse(self.path).path
            if not self._authorised(allow_query=False):
                return self._send(401, {"error": "missing or wrong token (see control.json)"})
            n = int(self.headers.get("Content-Length") or 0)
            if n > MAX_BODY:
                return self._send(413, {"error": f"request body above {MAX_BODY >> 20} MiB"})
            raw = self.rfile.read(n) if n else b""
            try:
                body = json.loads(raw) if raw.strip() else None
            except (ValueError, UnicodeDecodeError) as e:
                return self._send(400, {"error": f"malformed JSON: {one_line_text(str(e))}"})
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
        raise ControlError(
            f"no deployment answering at {c['url']} ({reason}); is it running?"
        ) from None
