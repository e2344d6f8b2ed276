"""The control API's reading of request bodies (cluster/service/control.py), on a stand-in
service (no Ray, no Spark): a body above the limit is answered with 413 and one line saying the
limit, not a broken pipe (issue 36: a 20 MB ``POST /add-queries`` got ``Broken pipe``), a
Content-Length that is not a count with 400, and the server keeps serving after either."""

from __future__ import annotations

import http.client
import json

import pytest

from cluster.service import control
from cluster.service.control import ControlError, ControlServer, call


class _Service:
    """What the routes used here touch: status and add-queries (never reached: every body
    sent here is refused)."""

    def add_queries(self, queries):
        raise AssertionError(f"add-queries ran with {queries!r}")

    def status(self):
        return {"state": "running"}

    def check_new_query_id(self, qid):
        pass


@pytest.fixture
def served(tmp_path):
    server = ControlServer(_Service())
    server.start()
    server.write_file(tmp_path / "control.json")
    try:
        yield server, tmp_path
    finally:
        server.stop()


def _post(server, body: bytes, headers=None):
    """A raw POST /add-queries: (status, reply JSON); the body is sent whole before the reply
    is read, as urllib and ``weaveplace ctl`` do."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.putrequest("POST", "/add-queries")
        conn.putheader("Authorization", f"Bearer {server.token}")
        for k, v in (headers or {"Content-Length": str(len(body))}).items():
            conn.putheader(k, v)
        conn.endheaders()
        conn.send(body)
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def test_oversized_body_gets_413_with_the_limit_and_the_server_goes_on(served):
    server, run_dir = served
    big = b"[" + b" " * (20 << 20) + b"]"  # 20 MiB: above MAX_BODY (8 MiB)
    code, reply = _post(server, big)
    assert code == 413
    assert reply == {"error": "request body of 20.0 MiB above the limit of 8 MiB"}
    # through the client `weaveplace ctl` uses: one line with the code, no broken pipe
    with pytest.raises(ControlError) as err:
        call(run_dir, "POST", "/add-queries", {"queries": ["x" * (9 << 20)]})
    assert str(err.value) == "request body of 9.0 MiB above the limit of 8 MiB (HTTP 413)"
    # and it keeps serving: a body just below the limit is read and judged on its content
    code, reply = _post(server, b"[" + b" " * (control.MAX_BODY - 2) + b"]")
    assert code == 400 and reply["error"].startswith("add-queries: expected a non-empty list")
    assert call(run_dir, "GET", "/status") == {"state": "running"}


@pytest.mark.parametrize("length", ["-5", "lots", "1e3", "²"])
def test_content_length_not_a_count_gets_400(served, length):
    server, run_dir = served
    code, reply = _post(server, b"[]", {"Content-Length": length})
    assert code == 400 and reply["error"].endswith(": not a count"), reply
    assert repr(length) in reply["error"]
    assert call(run_dir, "GET", "/status") == {"state": "running"}
