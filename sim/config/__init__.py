"""Run configuration (docs/DESIGN.md s. 5): one YAML file describes one run, validated by pydantic.

Why a strict schema: a typo in a long experiment file should stop the run before it starts, with
one line that names the key path, the bad value and what is allowed, never a pydantic dump.
Every model forbids unknown keys and uses strict types (``qnum: "100"`` is refused rather than
silently coerced; YAML already gives numbers as numbers). YAML is read as ``yaml.safe_load``
reads it (``sim.config.loading.safe_load``: libyaml, or ``json`` for a JSON config).

Sections (defaults and meaning in ``configs/README.md``):

- ``workload``: explicit ``queries`` or a ``generator`` whose parameters may each be a list; the
  run is the cartesian product of the lists (the dissertation's Table 8 grid).
- ``streams``: input rate per stream; only with explicit queries (the generator has ``rate``).
- ``cluster``: ``nodes`` is a count, a list of counts (one more grid axis: Table 8's N_num) or a
  list of ``{id, capacity}``; ``ray.address`` (``null``: embedded local Ray, used by live runs).
- ``placement``: optimizer name(s) (Table 7's thirteen, ``WG_LS``, ``WG_PF`` with its
  ``front_size`` and ``choose`` rule, and the single-node ones), IE
  technique, ``slicing`` (pairs or cutty: how plans are priced and live runs slice), edge
  engine, preprocessing and ``exact`` (compute the exact optimum on small runs).
- ``data``: a synthetic DEBS-style feed ``{duration_s, rate_hz, seed}``, a ``path`` or a watched
  ``directory`` of arriving files (live runs).
- ``run``: ``mode``, ``allowed_lateness``, ``output_dir``, ``seed`` (the optimizers' seed);
  live runs also ``batch_rows``, ``checkpoint_every``, ``answers`` (``driver``: merged on the
  driver, the default, faster on one machine; ``actors``: each node actor writes its Parquet
  parts), ``feed`` (``driver``: Spark -> driver -> actors, the default; ``executors``: Spark
  tasks push to the actors), ``feed_mode`` (``raw`` tuples, the default, or ``sliced``: Spark
  pre-aggregates slices; a file run's time windows only) and ``faults`` (a fault drill: kill a
  node's actor, lose a node for good, or add a node, before a given feed batch; with
  ``data.directory`` the batches are the ``batch_rows`` chunks of the files, in arrival order).

Relative paths: ``data.path`` and ``data.directory.path`` are relative to the config file (inputs
travel with the config); ``run.output_dir`` is relative to the working directory (outputs go
where the user runs).

Modules: one per section (``workload``, ``cluster``, ``placement``, ``data``, ``run``) on a
shared base (``base``), with the OS's limits on the paths they name in ``paths``; ``model`` is the whole ``Config`` with its cross-section checks and
``loading`` reads YAML into it with one-line error messages. Callers import from ``sim.config``.
"""

from sim.config.base import ConfigError
from sim.config.loading import config_from_mapping, load_config, load_config_text
from sim.config.model import MAX_GRID_POINTS, SECTIONS, Config
from sim.config.run import ControlSpec, FaultSpec, Run

__all__ = [
    "MAX_GRID_POINTS",
    "SECTIONS",
    "Config",
    "ConfigError",
    "ControlSpec",
    "FaultSpec",
    "Run",
    "config_from_mapping",
    "load_config",
    "load_config_text",
]
