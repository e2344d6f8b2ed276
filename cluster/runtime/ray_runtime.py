"""Start (or attach to) Ray for one run, and always shut it down again.

Why a wrapper: ``ray.init`` costs 6-11 s and ~1 GB of processes on this machine (docs/DESIGN.md s. 8),
the machine is shared, and a forgotten Ray keeps burning ~8% of a core.  ``RayRuntime`` is a
context manager that

* starts an **embedded local Ray** listening on 127.0.0.1 only, with no dashboard, a modest
  ``num_cpus`` and a bounded object store, keeping its session files under ``RAY_TMPDIR``
  (default ``/tmp/ray-weaveplace``, short enough for Ray's unix-socket path limit), or
* **attaches** to an existing cluster when ``address`` is given (``"auto"`` or ``"ray://..."`` /
  ``"host:port"``) - then it never shuts that cluster down, it only disconnects, or
* **reuses** a Ray this process already initialised (e.g. a pytest session fixture) and leaves it
  running: it is shut down by whoever started it.

**Token authentication** (Ray 2.60 default): a cluster started with ``ray start`` checks a
token on every RPC.  Ray's client loads one by itself only when ``RAY_AUTH_MODE=token`` is set
or the address is ``auto``; with an explicit address it connects without a token and then
retries for minutes.  ``RayRuntime`` therefore looks for a token like Ray's own loader
(``RAY_AUTH_TOKEN``, then the file ``RAY_AUTH_TOKEN_PATH``, then ``~/.ray/auth_token``), turns
token mode on when it finds one (unless ``RAY_AUTH_MODE`` is set: then it is respected), says
which source it used (``auth``: one line, also in the run's metrics), and probes the GCS once
(one RPC) so that a refused token (``InvalidAuthToken``) is a one-line ``ConnectionError``
with a hint instead of a long retry loop.

**What the embedded Ray exposes** (checked by ``tests/cluster/runtime/test_ray_exposure.py``): Ray turns
``_node_ip_address="127.0.0.1"`` into the machine's routable IP (``resolve_ip_for_localhost``),
and then the GCS, the raylet, the driver's and every worker's and actor's gRPC server listen on
all interfaces.  The one switch Ray has for loopback-only nodes is the one it uses on macOS and
Windows: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (node IP = 127.0.0.1).  ``RayRuntime`` sets it
(environment, inherited by every Ray process it starts, and Ray's already-imported constant)
for an embedded Ray only, and restores both on ``stop`` (an attached cluster needs the routable
IP).  Every TCP listener of the embedded Ray is then on 127.0.0.1; besides, token
authentication is on (Ray's default for a cluster ``ray.init`` starts: ``~/.ray/auth_token``,
created if missing), and the unix sockets (object store, raylet) are files under the session
directory in ``RAY_TMPDIR``.

**How long a silent host may stay silent** (``failure_timeout_s``, ``cluster.failure_timeout_s``
in a config, default 30 s): Ray's GCS declares a node dead after ``health_check_failure_threshold``
health checks in a row failed, each waiting up to ``health_check_timeout_ms`` and
``health_check_period_ms`` apart (Ray 2.60's names; its defaults 5, 10 s and 3 s: about 15 s
for a crashed host, whose checks fail at once, and about 65 s for a hung or cut-off one, whose
checks time out).  ``health_check_config`` turns the one setting into those keys (5 checks,
period = timeout = ``failure_timeout_s`` / 10) for the ``_system_config`` of an embedded Ray,
so a hung host is declared dead after at most ``failure_timeout_s`` (a crashed one after about
half).  Then its actors' calls fail (``node marked dead``) and the deployment recovers.  An
attached cluster keeps what ``ray start --system-config`` gave its head (the operator's
choice, README "Running on several hosts"); ``detection_bound_s`` reads the bound the
connected cluster applies, and the run's metrics report it.

``__exit__`` runs on exceptions and on ``KeyboardInterrupt`` alike (both are BaseException), so a
Ctrl-C during a run still stops the Ray processes this process started.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

DEFAULT_TMPDIR = "/tmp/ray-weaveplace"

#: seconds a silent (crashed, hung, cut-off) host may stay silent before Ray declares it dead
DEFAULT_FAILURE_TIMEOUT_S = 30.0
#: health checks in a row that must fail (Ray's ``health_check_failure_threshold``)
HEALTH_CHECKS = 5


def health_check_config(failure_timeout_s: float) -> dict[str, int]:
    """Ray's ``_system_config`` health-check keys for a bound of ``failure_timeout_s`` seconds
    on declaring a silent node dead: ``HEALTH_CHECKS`` checks, each waiting ``timeout`` and
    ``period`` apart, both ``failure_timeout_s / (2 * HEALTH_CHECKS)`` (at least 100 ms), so
    ``HEALTH_CHECKS * (period + timeout)`` (a hung node: every check times out) is the bound."""
    t = float(failure_timeout_s)
    if not t > 0 or t == float("inf"):
        raise ValueError(f"failure_timeout_s: {failure_timeout_s!r}; expected a number > 0")
    step = max(100, int(t * 1000 / (2 * HEALTH_CHECKS)))
    return {
        "health_check_initial_delay_ms": min(5000, step),
        "health_check_period_ms": step,
        "health_check_timeout_ms": step,
        "health_check_failure_threshold": HEALTH_CHECKS,
    }


def detection_bound_s() -> float | None:
    """The connected cluster's bound on declaring a silent node dead, in seconds:
    ``health_check_failure_threshold * (period + timeout)`` as this process's Ray reads its
    configuration (None before ``ray.init`` or if Ray's config API moved)."""
    try:
        from ray._raylet import Config

        period, timeout = Config.health_check_period_ms(), Config.health_check_timeout_ms()
        return Config.health_check_failure_threshold() * (period + timeout) / 1000.0
    except Exception:  # noqa: BLE001  (private API moved: unknown)
        return None


def _worker_env() -> dict[str, str]:
    """Env vars Ray workers must see.  Workers are forked by the raylet this process starts, so
    setting them before ``ray.init`` is enough; we also pass them in the runtime_env for attached
    clusters.  NUMBA_CACHE_DIR lets actors reuse compiled kernels instead of JIT-ing per actor."""
    from placement.numba_cache import ensure_cache_dir  # the one default (<checkout>/.cache/numba)

    ensure_cache_dir()  # read-only checkout: unset, numba then compiles in memory
    return {k: os.environ[k] for k in ("NUMBA_CACHE_DIR",) if k in os.environ}


def token_source() -> tuple[str | None, str]:
    """(token, where it came from) the way Ray's token loader looks: ``RAY_AUTH_TOKEN``, then
    the file named by ``RAY_AUTH_TOKEN_PATH``, then ``~/.ray/auth_token``; ``(None, why)``
    when there is none.  Only the source is ever shown, never the token."""
    tok = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if tok:
        return tok, "the RAY_AUTH_TOKEN environment variable"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path:
        try:
            tok = Path(path).expanduser().read_text().strip()
        except OSError:
            tok = ""
        return (tok or None), (
            f"RAY_AUTH_TOKEN_PATH ({path})"
            if tok
            else f"RAY_AUTH_TOKEN_PATH ({path}: unreadable or empty)"
        )
    home = Path.home() / ".ray" / "auth_token"
    try:
        tok = home.read_text().strip()
    except OSError:
        tok = ""
    return (tok or None), (
        "~/.ray/auth_token"
        if tok
        else "none (no RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)"
    )


def _enable_token_mode() -> None:
    """``RAY_AUTH_MODE=token`` for this process (and children), re-read by Ray's cached
    config, as ``ray.init`` does itself for a new local cluster."""
    os.environ["RAY_AUTH_MODE"] = "token"
    try:
        from ray._raylet import Config

        Config.initialize("")
    except Exception:  # noqa: BLE001  (private API moved: the env var still applies to init)
        pass


AUTH_HINT = (
    "the cluster's token is needed: copy the head node's ~/.ray/auth_token to this "
    "machine, or set RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH to a file holding it)"
)


def attach_auth(address: str) -> str:
    """Prepare token authentication for attaching to ``address`` and say in one line which
    token source is used; ``ConnectionError`` (one line, with a hint) when the cluster refuses
    the token (``InvalidAuthToken``).  Other connection problems are left to ``ray.init``."""
    mode = os.environ.get("RAY_AUTH_MODE")
    tok, where = token_source()
    if mode is not None and mode.lower() != "token":
        auth = f"no token (RAY_AUTH_MODE={mode})"
    elif tok is None:
        auth = f"no token: {where}"
    else:
        if mode is None:
            _enable_token_mode()
        auth = f"token from {where}"
    if address.startswith("ray://") or address == "auto":
        return auth
    try:
        from ray._raylet import GcsClient
        from ray.exceptions import AuthenticationError
    except ImportError:  # pragma: no cover  (private API moved: no probe)
        return auth
    try:
        GcsClient(address=address).internal_kv_get(b"weaveplace_probe", None, timeout=5)
    except AuthenticationError:
        hint = (
            AUTH_HINT
            if mode is None or mode.lower() == "token"
            else f"unset RAY_AUTH_MODE (or set it to token); {AUTH_HINT}"
        )
        raise ConnectionError(
            f"InvalidAuthToken: the cluster refused the connection with {auth}; {hint}"
        ) from None
    except Exception:  # noqa: BLE001  (unreachable etc.: ray.init reports it)
        pass
    return auth


def _embedded_auth() -> str:
    """One line on how the embedded Ray is protected (Ray enables token mode by default for a
    cluster ``ray.init`` starts, and creates ``~/.ray/auth_token`` if missing)."""
    mode = os.environ.get("RAY_AUTH_MODE", "")
    if mode.lower() == "token":
        return f"token authentication, token from {token_source()[1]}"
    return f"no token authentication (RAY_AUTH_MODE={mode or 'unset'})"


LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def _loopback_only():
    """Make the Ray processes this process starts use 127.0.0.1 as their node IP (so they listen
    there only); returns a function that restores the previous setting."""
    import ray._private.ray_constants as rc

    old_env, old_const = os.environ.get(LOOPBACK_ENV), rc.ENABLE_RAY_CLUSTER
    os.environ[LOOPBACK_ENV] = "0"
    rc.ENABLE_RAY_CLUSTER = False

    def restore() -> None:
        rc.ENABLE_RAY_CLUSTER = old_const
        if old_env is None:
            os.environ.pop(LOOPBACK_ENV, None)
        else:
            os.environ[LOOPBACK_ENV] = old_env

    return restore


class RayRuntime:
    """Context manager owning (or borrowing) a Ray connection for one run.

    >>> with RayRuntime(num_cpus=2) as rt:      # embedded local Ray
    ...     dep = Deployment(plan)
    >>> with RayRuntime(address="auto"): ...   # attach to a running cluster

    ``owned`` tells whether this object started Ray (and therefore stops it).

    ``preload``: modules an embedded Ray's Python workers import as they start, before taking
    work (Ray's ``preload_python_modules``): a live run names its node actors' code, so the
    workers Ray prestarts while it starts import it then, not once an actor is created there
    (about 0.5 s of CPU a worker).  An attached cluster keeps its own settings.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        num_cpus: int | None = 2,
        object_store_memory: int | None = 512 * 1024**2,
        tmpdir: str | None = None,
        namespace: str | None = "weaveplace",
        quiet: bool = True,
        failure_timeout_s: float = DEFAULT_FAILURE_TIMEOUT_S,
        preload: tuple[str, ...] = (),
    ):
        self.address = address
        self.preload = tuple(preload)
        self.num_cpus = num_cpus
        self.object_store_memory = object_store_memory
        self.tmpdir = tmpdir or os.environ.get("RAY_TMPDIR") or DEFAULT_TMPDIR
        self.namespace = namespace
        self.quiet = quiet
        self.health_checks = health_check_config(failure_timeout_s)  # checked before starting
        #: the bound Ray applies once started (``detection_bound_s``): the embedded Ray's from
        #: ``failure_timeout_s``, an attached cluster's from its ``ray start``
        self.failure_detection_s: float | None = None
        self.owned = False
        self.started = False
        #: one line: which token this connection uses (``attach_auth``), None when embedded
        self.auth: str | None = None
        self._restore = None  # undoes the loopback-only setting of an embedded Ray

    def start(self) -> RayRuntime:
        import ray

        if ray.is_initialized():  # borrowed: a fixture or the caller owns it
            self.started, self.owned = True, False
            self.failure_detection_s = detection_bound_s()
            return self
        env = _worker_env()
        kw = dict(
            include_dashboard=False,
            namespace=self.namespace,
            logging_level=logging.WARNING if self.quiet else logging.INFO,
            log_to_driver=not self.quiet,
        )
        if self.address in (None, "", "local"):
            os.environ["RAY_TMPDIR"] = self.tmpdir
            Path(self.tmpdir).mkdir(parents=True, exist_ok=True)
            kw.update(
                address="local",
                num_cpus=self.num_cpus,
                object_store_memory=self.object_store_memory,
                _node_ip_address="127.0.0.1",
                _temp_dir=self.tmpdir,
                _system_config=dict(
                    self.health_checks,
                    **({"preload_python_modules": list(self.preload)} if self.preload else {}),
                ),
            )
            self._restore = _loopback_only()
            self.owned = True
        else:  # attach: the cluster's own resources apply; ship our env to its workers
            self.auth = attach_auth(self.address)
            kw.update(address=self.address, runtime_env={"env_vars": env} if env else None)
            self.owned = False
        try:
            ray.init(**kw)
        except BaseException as exc:
            from ray.exceptions import AuthenticationError

            self._undo_loopback()

            if isinstance(exc, AuthenticationError) or "InvalidAuthToken" in str(exc):
                raise ConnectionError(
                    f"InvalidAuthToken: the cluster refused the connection "
                    f"with {self.auth}; {AUTH_HINT}"
                ) from None
            raise
        if self.owned:
            self.auth = "embedded: " + _embedded_auth()
        self.failure_detection_s = detection_bound_s()
        self.started = True
        return self

    def stop(self) -> None:
        """Shut Ray down if we started it; disconnect if we attached; leave a borrowed Ray."""
        import ray

        if self.started and ray.is_initialized():
            if self.owned or self.address not in (None, "", "local"):
                ray.shutdown()
        self._undo_loopback()
        self.started = False

    def _undo_loopback(self) -> None:
        if self._restore is not None:
            self._restore()
            self._restore = None

    def __enter__(self) -> RayRuntime:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop()

    def __repr__(self) -> str:  # pragma: no cover
        return (
            f"RayRuntime(address={self.address!r}, owned={self.owned}, "
            f"started={self.started}, tmpdir={self.tmpdir!r})"
        )
