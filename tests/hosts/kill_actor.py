"""Kill a plan node's actor process (SIGKILL) once it has taken ``min_batches`` feed batches:
a fault behind a running deployment's back, landing mid-feed.

Run as a script on the head host with the cluster's token in the environment (a second Ray
driver beside the run's):  ``python kill_actor.py ADDRESS NODE_ID MIN_BATCHES TIMEOUT_S [IP]
[--wait]``.
Why a driver of its own: the actor's pid and host come from Ray's actor table (the GCS, by the
actor's name ``weaveplace-<run>-<node>-<k>``; the state API needs the dashboard, which the
emulated cluster does not run), and only a driver can ask the actor how far the feed has got.
``serve``'s node actors have no names: with ``IP`` the actor is the one live node actor on that
host (plan nodes are pinned one per host), and ``MIN_BATCHES`` must be 0 (no handle to ask).
With ``--wait`` it kills nothing: it only waits for the batches, so that the caller injects a
host fault right after, mid-feed.  Prints one JSON line: the pid (killed), its host's IP, the
batches the actor had taken, and the wall time of the kill (or of the end of the wait).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import ray
from ray._private import state as ray_state

#: the classes of the node actors (``cluster.node.actor``, ``cluster.node.churn``)
NODE_CLASSES = ("ActorCore", "ChurnNodeCore")


def _alive_actor(node_id: str, ip: str | None) -> dict | None:
    alive = [a for a in ray_state.actors().values() if a["State"] == "ALIVE"]
    for a in alive:
        name = a.get("Name") or ""
        if name.startswith("weaveplace-") and f"-{node_id}-" in name:
            return a
    if ip is None:
        return None
    on_host = [
        a for a in alive if a["ActorClassName"] in NODE_CLASSES and a["Address"]["IPAddress"] == ip
    ]
    if len(on_host) > 1:
        sys.exit(f"{len(on_host)} node actors on {ip}: which is {node_id}?")
    return on_host[0] if on_host else None


def main(
    address: str, node_id: str, min_batches: int, timeout_s: float, ip: str | None, kill: bool
) -> None:
    ray.init(address=address, namespace="weaveplace", logging_level="ERROR")
    deadline = time.monotonic() + timeout_s
    while (info := _alive_actor(node_id, ip)) is None or not info["Pid"]:
        if time.monotonic() > deadline:
            sys.exit(f"no live actor for {node_id} after {timeout_s} s")
        time.sleep(0.2)
    batches = 0
    if min_batches > 0:
        actor = ray.get_actor(info["Name"], namespace="weaveplace")
        while (batches := ray.get(actor.metrics.remote())["batches"]) < min_batches:
            if time.monotonic() > deadline:
                sys.exit(f"{node_id} took only {batches} batches in {timeout_s} s")
            time.sleep(0.05)
    if kill:
        os.kill(int(info["Pid"]), signal.SIGKILL)
    out = {
        "pid": int(info["Pid"]),
        "ip": info["Address"]["IPAddress"],
        "name": info["Name"],
        "batches": int(batches),
        "wall_time": time.time(),
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--wait"]
    main(
        args[0],
        args[1],
        int(args[2]),
        float(args[3]),
        args[4] if len(args) > 4 else None,
        kill="--wait" not in sys.argv,
    )
