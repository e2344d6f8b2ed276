"""WG_BAND: To Nodes on density bands, our distributed optimizer for very many queries.

Why: WG_TN is WeaveShare's loop followed by Group To Lowest, and WeaveShare's pair table
grows faster than the query count (N^1.2-1.3 on wide window menus up to 300,000 queries,
steeper beyond: one and a half to three minutes for 100,000 queries of slides up to 10,000, over
an hour for a million). Woven alone, a band of units of similar edge density finds each unit
partners nearly as good as the whole set would: cut into bands of 10,000 units, 100,000 such
queries cost 0.7 % more (BENCHMARKS.md, "WG_BAND"), and the work is linear in N.

Steps:

1. **Units**: equal residue classes grouped (``preprocess: classes``, a perfect weave, what
   WeaveShare always starts from); ``preprocess: slides`` groups by slide instead. Units are
   never single queries: repeated windows would push every band onto the Python table.
2. **Bands**: per key (stream, aggregate, window kind), units in order of their edge rate,
   densest first (ties in input order), cut into ``ceil(n / band_size)`` contiguous bands of
   equal size (within one unit).
3. **Weave**: each band to WeaveShare's fixpoint (``placement.weaveshare.weave``), alone.
4. **Place**: the trees by Group To Lowest (most expensive first, each to the least loaded
   node), as WG_TN places its trees.

With at most ``band_size`` units of a key there is one band, and the plan is WG_TN's with
grouped units (``preprocess: classes``) exactly. Deterministic: ``seed`` is not used. On one
node the same trees are the single-node optimizer ``banded_weaveshare`` (``weaveplace plan``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from placement.distributed import NodeState, build_plan, group_to_lowest, make_units
from placement.plan import Plan
from placement.queries import Query
from placement.trees import CostModel, Tree
from placement.weaveshare import Progress, initial_trees, weave

#: units a band holds at most: the loss against one weave of everything grows with the number
#: of bands, the time with their size (BENCHMARKS.md, "WG_BAND")
BAND_SIZE = 10_000


def bands(units: Sequence[Tree], band_size: int = BAND_SIZE) -> list[list[Tree]]:
    """The units cut into bands: per key in order of first appearance, densest first (stable),
    ``ceil(n / band_size)`` contiguous bands whose sizes differ by at most one."""
    if band_size < 1:
        raise ValueError(f"band_size must be >= 1, got {band_size}")
    by_key: dict[tuple, list[Tree]] = {}
    for u in units:
        by_key.setdefault(u.key, []).append(u)
    out: list[list[Tree]] = []
    for same in by_key.values():
        ordered = sorted(same, key=lambda t: -float(t.edge_rate))
        n = len(ordered)
        k = math.ceil(n / band_size)
        out.extend(ordered[i * n // k : (i + 1) * n // k] for i in range(k))
    return out


def banded_weave(
    units: Sequence[Tree], model: CostModel, band_size: int = BAND_SIZE, progress: Progress = None
) -> list[Tree]:
    """Every band woven to its fixpoint, alone; the trees of all bands, band by band.
    ``progress`` is ticked with the units' queries in all: a band's queries beyond one per
    unit as it starts, then its weave's (``weave``: one per unit)."""
    out: list[Tree] = []
    for band in bands(units, band_size):
        if progress:
            progress(sum(len(u.queries) for u in band) - len(band))
        out.extend(weave(band, model, progress))
    return out


def banded_weaveshare(
    queries: Iterable[Query],
    model: CostModel,
    progress: Progress = None,
    band_size: int = BAND_SIZE,
) -> list[Tree]:
    """WG_BAND's trees for one node: WeaveShare's start (equal residue classes grouped), woven
    band by band. WeaveShare's plan up to ``band_size`` units; beyond, a little dearer."""
    return banded_weave(initial_trees(queries, model), model, band_size, progress)


def wg_band(
    queries: Sequence[Query],
    model: CostModel,
    caps: list,
    seed: int = 0,
    preprocess: bool | str = False,
    band_size: int = BAND_SIZE,
) -> Plan:
    """WG_BAND (module docstring) on validated queries and node capacities."""
    units = make_units(queries, model, "slides" if preprocess == "slides" else "classes")
    st = NodeState(caps)
    group_to_lowest(banded_weave(units, model, band_size), st)
    return build_plan("WG_BAND", model, st.trees, caps, queries)
