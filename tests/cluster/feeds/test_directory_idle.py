"""An idle directory stream looks after its deployment between micro-batches
(``DirectoryStream._recover_idle``): nodes declared stuck or gone are recovered, and a node
left behind while it was silent is caught up once it answers again, with no file arriving
(an idle stream sends no batch that would catch it up)."""

from __future__ import annotations

from cluster.feeds.directory import DirectoryStream


class FakeLiveness:
    def __init__(self, dep):
        self.dep = dep
        self.pending: list[str] = []  # declared stuck or found gone

    def needs_attention(self):
        return bool(self.pending)

    def silent(self, nid):
        return nid not in self.dep.answering


class FakeDep:
    streams = ["mf01"]
    allowed_lateness = 0

    def __init__(self):
        self.liveness = FakeLiveness(self)
        self.behind: set[str] = set()
        self.answering: set[str] = set()
        self.calls: list[tuple[str, ...]] = []

    @property
    def lagging(self):
        return sorted(self.behind)

    def catch_up_answering(self):
        caught = self.behind & self.answering
        self.calls.append(("catch_up", *sorted(caught)))
        self.behind -= caught
        return bool(caught)

    def recover_declared(self):
        self.calls.append(("recover", *self.liveness.pending))
        self.liveness.pending = []


class Stream(DirectoryStream):
    def __init__(self, dep, directory, out):
        super().__init__(dep, None, directory, out)
        self.hooks = 0

    def _after_idle_recovery(self):
        self.hooks += 1


def _stream(tmp_path):
    (tmp_path / "in").mkdir()
    dep = FakeDep()
    return dep, Stream(dep, tmp_path / "in", tmp_path / "out")


def test_a_node_behind_is_caught_up_once_it_answers(tmp_path):
    dep, s = _stream(tmp_path)
    dep.behind = {"node-1"}
    s._recover_idle()  # still silent: nothing to do, the owner's hook not run
    assert dep.calls == [] and s.hooks == 0 and dep.lagging == ["node-1"]
    dep.answering = {"node-1"}
    s._recover_idle()
    assert ("catch_up", "node-1") in dep.calls
    assert dep.lagging == [] and s.hooks == 1  # caught up: the state is saved again
    s._recover_idle()  # nothing left
    assert s.hooks == 1


def test_recovery_and_catch_up_run_between_micro_batches_only(tmp_path):
    dep, s = _stream(tmp_path)
    dep.behind, dep.answering = {"node-1"}, {"node-1"}
    dep.liveness.pending = ["node-2"]
    with s.between_batches():  # a micro-batch (or a command) holds the stream
        s._recover_idle()
    assert dep.calls == [] and s.hooks == 0
    s._recover_idle()
    assert dep.calls[0] == ("recover", "node-2")
    assert dep.lagging == [] and s.hooks == 1


def test_a_recovery_runs_the_hook_even_when_no_node_catches_up(tmp_path):
    dep, s = _stream(tmp_path)
    dep.behind = {"node-1"}  # silent still
    dep.liveness.pending = ["node-2"]
    s._recover_idle()
    assert dep.calls == [("recover", "node-2"), ("catch_up",)]
    assert dep.lagging == ["node-1"] and s.hooks == 1
