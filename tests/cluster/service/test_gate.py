"""The control plane never waits behind the data path (cluster/service/gate.py, status.current):
a command waits a bounded time and is refused with 503 and one line saying what it waited
for; a status while the data path holds the lock answers at once from the last one; a silent
node refuses commands at once; ``weaveplace ctl`` gives up after its timeout, saying so."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager

import pytest

from cluster.service import status as service_status
from cluster.service.control import ControlError, call, http_status
from cluster.service.gate import Gate
from cluster.service.refusals import Unavailable


class FakeStream:
    """The stream's micro-batch lock and its start time, as ``DirectoryStream`` has them."""

    def __init__(self):
        self.lock = threading.Lock()
        self.batch_started = None

    @contextmanager
    def between_batches(self, timeout=None):
        got = self.lock.acquire(timeout=-1 if timeout is None else timeout)
        try:
            yield got
        finally:
            if got:
                self.lock.release()


class FakeLiveness:
    call_timeout_s = 30.0


class FakeDep:
    def __init__(self):
        self.liveness = FakeLiveness()
        self.nodes_vitals = {"node-0": {"health": "ok", "behind": False}}
        self.recovered: set[str] = set()  # the nodes that answer again

    def vitals(self):
        return self.nodes_vitals

    @property
    def lagging(self):
        return sorted(n for n, v in self.nodes_vitals.items() if v.get("behind"))

    def catch_up_answering(self):
        """The nodes behind that answer again (``recovered``) catch up; silent ones do not."""
        caught = [n for n in self.lagging if n in self.recovered]
        for nid in caught:
            self.nodes_vitals[nid] = {"health": "ok", "behind": False}
        return bool(caught)


def test_a_command_waits_a_bounded_time_for_a_stuck_micro_batch():
    stream, dep = FakeStream(), FakeDep()
    gate = Gate(stream, dep, wait_s=0.4)
    stream.lock.acquire()  # a micro-batch that does not end
    stream.batch_started = time.monotonic() - 12
    t0 = time.monotonic()
    with pytest.raises(Unavailable) as e:
        with gate.exclusive("add-queries"):
            pass
    assert 0.35 <= time.monotonic() - t0 < 2.0
    msg = e.value.message
    assert msg.startswith("add-queries: waited 0.") and "busy: micro-batch for 12." in msg
    assert "\n" not in msg and http_status(e.value) == 503
    stream.lock.release()
    stream.batch_started = None
    with gate.exclusive("add-queries"):  # free again: the command runs
        assert gate.describe()["busy"] == "add-queries"
    assert gate.describe()["busy"] is None


def test_a_node_behind_or_stuck_refuses_commands_at_once():
    stream, dep = FakeStream(), FakeDep()
    gate = Gate(stream, dep, wait_s=5)
    dep.nodes_vitals["node-1"] = {
        "health": "silent",
        "behind": True,
        "silent_s": 4.25,
        "call": "ingest",
    }
    t0 = time.monotonic()
    with pytest.raises(Unavailable) as e:
        with gate.exclusive("retire-node"):
            pass
    assert time.monotonic() - t0 < 1.0
    assert e.value.message == (
        "retire-node: node-1 silent for 4.2 s in ingest (declared stuck and restarted at "
        "cluster.call_timeout_s: 30 s); try again"
    )
    d = gate.describe()
    assert (d["silent"], d["behind"], d["stuck"]) == (["node-1"], ["node-1"], [])
    # a node slow to answer its health check but not skipped by the data path: waited for
    dep.nodes_vitals["node-1"] = {"health": "silent", "behind": False, "silent_s": 3.0}
    with gate.exclusive("retire-node"):
        pass


class FakeService:
    def __init__(self, gate):
        self.gate = gate
        self.last_status = None
        self.state = "running"
        self.event_time = 1234
        self.computed = 0

    def log_faults(self):
        pass


def test_status_answers_from_the_last_one_while_the_lock_is_held(monkeypatch):
    stream, dep = FakeStream(), FakeDep()
    gate = Gate(stream, dep, wait_s=5, peek_s=0.1)
    svc = FakeService(gate)

    def fresh(s):
        s.computed += 1
        return {"state": s.state, "nodes": {}, "n": s.computed}

    monkeypatch.setattr(service_status, "status", fresh)
    gate.lock.acquire()  # a command holds the lock since the start: no status yet
    t0 = time.monotonic()
    st = service_status.current(svc)
    assert time.monotonic() - t0 < 0.5
    assert st["state"] == "running" and "nodes" not in st and st["stale_s"] is None
    gate.lock.release()
    st = service_status.current(svc)
    assert st["n"] == 1 and st["stale_s"] < 0.1 and st["data_path"]["busy"] is None
    gate.lock.acquire()
    gate.holder = ("rebalance", time.monotonic() - 3)
    time.sleep(0.2)
    st = service_status.current(svc)
    assert st["n"] == 1 and st["stale_s"] >= 0.2  # the last one, with its age
    assert st["data_path"]["busy"] == "rebalance" and st["data_path"]["busy_s"] >= 3
    gate.lock.release()


def test_ctl_gives_up_after_its_timeout_and_says_what_it_waited_for(tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)  # accepts, never answers
    port = srv.getsockname()[1]
    (tmp_path / "control.json").write_text(f'{{"url": "http://127.0.0.1:{port}", "token": "t"}}')
    t0 = time.monotonic()
    with pytest.raises(ControlError) as e:
        call(tmp_path, "POST", "/add-queries", {"queries": []}, timeout=0.5)
    assert time.monotonic() - t0 < 3
    assert str(e.value).startswith(
        f"no reply within 0.5 s from http://127.0.0.1:{port} to POST /add-queries"
    )
    srv.close()


def test_a_node_behind_that_answers_again_is_caught_up_before_the_command():
    """An idle stream sends no batch that would bring a node behind up to date: the command
    catches it up first instead of refusing (503) until new data arrives."""
    stream, dep = FakeStream(), FakeDep()
    dep.nodes_vitals["node-0"] = {"health": "ok", "behind": True}
    dep.recovered = {"node-0"}
    gate = Gate(stream, dep, wait_s=0.4)
    with gate.exclusive("retire-node"):
        pass
    assert dep.lagging == []
    dep.nodes_vitals["node-1"] = {"health": "silent", "behind": True, "silent_s": 3.0}
    with pytest.raises(Unavailable, match="node-1 silent for 3.0 s"):
        with gate.exclusive("retire-node"):
            pass
