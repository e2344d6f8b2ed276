"""``cluster.deployment.churn.Meanwhile``: the driver's own work beside a tree change (no Ray)."""

from __future__ import annotations

import threading

from cluster.deployment.churn import Meanwhile


def test_meanwhile_runs_beside_the_caller_and_join_waits_for_it():
    started, release, done = threading.Event(), threading.Event(), []

    def work():
        started.set()
        release.wait(5)
        done.append(threading.current_thread() is not threading.main_thread())

    m = Meanwhile(work)
    assert started.wait(5) and not done  # running, beside this thread
    release.set()
    m.join()
    assert done == [True]


def test_meanwhile_drops_its_error():
    def work():
        raise RuntimeError("warm-up failed")

    Meanwhile(work).join()  # nothing raised: the step it warmed raises it when it runs
