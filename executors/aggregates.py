"""Aggregates as monoids, and the numeric primitives the compiled kernels run on.

Two views of the same aggregates (one file, ~640 lines, because each aggregate is defined once
with both views side by side; splitting the views would list every aggregate twice):

* **Monoid view** (``Aggregate.lift / combine / lower / identity / inverse``): small,
  pure Python, exact on Python ints.  It documents the algebra and is what tests
  and readers use to reason about an aggregate.

* **Primitive view** (``Aggregate.primitives``): every aggregate is decomposed into
  one or more *primitives*, each a (op, source, dtype) triple with op one of
  ``OP_SUM`` / ``OP_MIN`` / ``OP_MAX``.  ``avg`` is (sum v, sum 1), ``stddev`` is
  (sum 1, sum v, sum v*v), ``range`` is (min v, max v).  A primitive is what the
  final-aggregation kernels maintain; queries of one execution tree that need the
  same primitive share it (``count`` and ``avg`` share ``sum 1``), which is the
  "compatible aggregates share partials" rule of the dissertation (section 2.4.1).

Numeric representation (why): every primitive value is a pair ``(hi, lo)`` of the
same dtype, so one kernel source serves every aggregate.

* int64 sums: ``lo`` is always 0, ``hi`` is the exact int64 sum (wrap-around on
  overflow, like numpy).  Subtract-on-evict is exact, no drift.
* float64 sums: ``(hi, lo)`` is a double-double (error-free ``two_sum``), about
  106 bits of mantissa.  This is the guard against subtract-on-evict drift: a
  running sum that adds and subtracts for hours keeps an error ~1e-32 relative to
  the magnitudes involved, far below the 1e-9 contract, without periodic
  recomputation.  ``v*v`` for stddev is lifted exactly with Dekker's two_prod.
* min / max: ``hi`` is the value, ``lo`` is unused (0).

stddev is the **population** standard deviation (ddof=0, numpy's default):
``sqrt(E[x^2] - E[x]^2)``, evaluated in double-double so that data with a large
mean and a small spread does not cancel catastrophically.

A window with no tuples never reaches ``lower`` (it produces no answer), so the
identities (0, +inf, -inf, INT64_MAX/MIN) never leak into answers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit, types
from numba.extending import intrinsic, overload

OP_SUM = 0
OP_MIN = 1
OP_MAX = 2
OP_NAMES = {OP_SUM: "sum", OP_MIN: "min", OP_MAX: "max"}

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


# ----------------------------------------------------------------------------- numba core ops
@njit(cache=True)
def two_sum(a, b):
    """Knuth's error-free sum: a + b == s + err exactly (err == 0 for ints)."""
    s = a + b
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    return s, err


@njit(cache=True)
def quick_two_sum(a, b):
    s = a + b
    err = b - (s - a)
    return s, err


@njit(cache=True)
def dd_add(ah, al, bh, bl):
    """Accurate double-double addition (also exact, and cheap to reason about, on ints)."""
    s, e = two_sum(ah, bh)
    t, f = two_sum(al, bl)
    e += t
    s, e = quick_two_sum(s, e)
    e += f
    return quick_two_sum(s, e)


@njit(cache=True)
def combine2(op, ah, al, bh, bl):
    """The monoid operation on (hi, lo) pairs; ``op`` is OP_SUM / OP_MIN / OP_MAX."""
    if op == OP_SUM:
        return dd_add(ah, al, bh, bl)
    elif op == OP_MIN:
        if bh < ah:
            return bh, al
        return ah, al
    else:
        if bh > ah:
            return bh, al
        return ah, al


@njit(cache=True)
def fold_back(op, ring_hi, ring_lo, cur, n, ah, al):
    """Combine ``(ah, al)`` (the partial at ``cur``) with the ``n - 1`` partials before it in a
    ring, newest last: the naive recomputation Panes does per answer (``n - 1`` operations)."""
    W = len(ring_hi)
    idx = cur
    for _ in range(n - 1):
        idx -= 1
        if idx < 0:
            idx += W
        ah, al = combine2(op, ring_hi[idx], ring_lo[idx], ah, al)
    return ah, al


@njit(cache=True)
def inverse2(ah, al, bh, bl):
    """a (-) b for sums: the inverse used by subtract-on-evict (only OP_SUM has one)."""
    return dd_add(ah, al, -bh, -bl)


@njit(cache=True)
def _split(a):
    c = 134217729.0 * a  # 2^27 + 1 (Veltkamp split)
    hi = c - (c - a)
    return hi, a - hi


@njit(cache=True)
def two_prod(a, b):
    """Dekker's error-free product: a*b == p + e exactly (barring over/underflow)."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


@njit(cache=True)
def dd_mul(ah, al, bh, bl):
    p, e = two_prod(ah, bh)
    e += ah * bl + al * bh
    return quick_two_sum(p, e)


@njit(cache=True)
def dd_div_d(ah, al, b):
    """Double-double divided by a double (one Newton correction)."""
    q1 = ah / b
    p, e = two_prod(q1, b)
    s, f = two_sum(ah, -p)
    f -= e
    f += al
    q2 = (s + f) / b
    return quick_two_sum(q1, q2)


@njit(cache=True)
def lift_square(v, out_hi, out_lo):
    """Lift x -> x*x exactly as a double-double (stddev's sum of squares)."""
    for i in range(v.shape[0]):
        p, e = two_prod(v[i], v[i])
        out_hi[i] = p
        out_lo[i] = e


@njit(cache=True)
def lower_stddev(n, s1h, s1l, s2h, s2l, out):
    """Population stddev from (count, sum, sum of squares), in double-double."""
    for i in range(n.shape[0]):
        c = float(n[i])
        if c <= 0.0:
            out[i] = np.nan
            continue
        # var * n^2 = n*S2 - S1^2
        ph, pl = dd_mul(s1h[i], s1l[i], s1h[i], s1l[i])
        qh, ql = dd_mul(s2h[i], s2l[i], c, 0.0)
        dh, dl = dd_add(qh, ql, -ph, -pl)
        vh, vl = dd_div_d(dh, dl, c * c)
        var = vh + vl
        out[i] = math.sqrt(var) if var > 0.0 else 0.0


@njit(cache=True)
def reduce_slices(op, slice_idx, hi, lo, out_hi, out_lo):
    """Partial aggregation: fold tuples into their slices (tuples sorted by slice).

    A numba loop rather than ``np.add.reduceat`` because float sums must be
    accumulated in double-double and ``reduceat`` mishandles empty slices.
    ``out_*`` must arrive filled with the identity.
    """
    for i in range(slice_idx.shape[0]):
        j = slice_idx[i]
        h, l = combine2(op, out_hi[j], out_lo[j], hi[i], lo[i])
        out_hi[j] = h
        out_lo[j] = l


# ----------------------------------------------------------------------------- running sums
# SlickDeque Inv keeps one running sum per window length and updates it with
# ``ans (+) new (-) old`` per slice.  As two chained double-double additions that update
# is a loop-carried chain of ~26 dependent float additions (~30 M slices/s).  The
# running sum is instead an unevaluated triple ``S + C + D``:
#
# * ``S, e = two_sum(S, x)`` and ``C, f = two_sum(C, e)`` are error-free, so
#   ``S + C + D`` changes by exactly ``x`` except for the rounding of ``D += f``;
#   the loop-carried chains are one addition each on S, C and D.
# * ``run_renorm`` (two error-free two_sums, no rounding at all) runs at least every
#   64 slices and keeps ``|C| <= ~2^8 u M`` and ``|D| <= ~2^16 u^2 M`` (u = 2^-53,
#   M the magnitudes of the running sum and the partials since the last renorm), so
#   each slice's rounding is below ``u |D| ~ 2^-143 M``, against up to ``6 u^2 M ~
#   2^-103 M`` for the two accurate double-double additions it replaces.
# * ``run_value`` rounds the triple to a double-double answer once (two_sum + one
#   addition, error <= ~u^2 of the answer), like the old state itself.
#
# int64 sums (``lo`` always 0) skip all of it: ``S += new - old`` with wrap-around,
# exactly what dd_add computes on ints.


@intrinsic
def select(typingctx, cond, a, b):
    """``a if cond else b`` as one LLVM select (no branch: the conditions in SlickDeque
    Non-Inv's pop step are data-dependent and would be mispredicted ~half the time)."""
    if not isinstance(cond, types.Boolean) or a != b:
        return None

    def codegen(context, builder, signature, args):
        return builder.select(args[0], args[1], args[2])

    return a(cond, a, b), codegen


@njit(cache=True)
def _slide_f(S, C, D, nh, nl, oh, ol):
    S, e1 = two_sum(S, nh)
    S, e2 = two_sum(S, -oh)
    C, f1 = two_sum(C, e1)
    C, f2 = two_sum(C, e2)
    if nl != 0.0 or ol != 0.0:  # lo parts of slice partials (0 for single tuples)
        C, f3 = two_sum(C, nl)
        C, f4 = two_sum(C, -ol)
        return S, C, D + ((f1 + f2) + (f3 + f4))
    return S, C, D + (f1 + f2)


@njit(cache=True)
def _slide_i(S, C, D, nh, nl, oh, ol):
    return S + (nh - oh) + (nl - ol), C, D


@njit(cache=True)
def _renorm_f(S, C, D):
    S, e = two_sum(S, C)
    C, D = two_sum(e, D)
    return S, C, D


@njit(cache=True)
def _renorm_i(S, C, D):
    return S, C, D


@njit(cache=True)
def _value_f(S, C, D):
    h, e = two_sum(S, C)
    return h, e + D


@njit(cache=True)
def _value_i(S, C, D):
    return S, C


def run_slide(S, C, D, nh, nl, oh, ol):
    """Running sum (S, C, D) plus partial (nh, nl) minus partial (oh, ol) (compiled only)."""
    raise NotImplementedError("run_slide is for numba kernels")


def run_renorm(S, C, D):
    """Error-free renormalisation of a running sum (compiled only)."""
    raise NotImplementedError("run_renorm is for numba kernels")


def run_value(S, C, D):
    """The running sum as a (hi, lo) answer (compiled only)."""
    raise NotImplementedError("run_value is for numba kernels")


@overload(run_slide)
def _ov_run_slide(S, C, D, nh, nl, oh, ol):
    if isinstance(S, types.Integer):
        return lambda S, C, D, nh, nl, oh, ol: _slide_i(S, C, D, nh, nl, oh, ol)
    return lambda S, C, D, nh, nl, oh, ol: _slide_f(S, C, D, nh, nl, oh, ol)


@overload(run_renorm)
def _ov_run_renorm(S, C, D):
    if isinstance(S, types.Integer):
        return lambda S, C, D: _renorm_i(S, C, D)
    return lambda S, C, D: _renorm_f(S, C, D)


@overload(run_value)
def _ov_run_value(S, C, D):
    if isinstance(S, types.Integer):
        return lambda S, C, D: _value_i(S, C, D)
    return lambda S, C, D: _value_f(S, C, D)


#: renormalise running sums when the ring position is a multiple of this (a power of two)
RENORM_EVERY = 64


# ----------------------------------------------------------------------------- primitives
@dataclass(frozen=True)
class Primitive:
    """One maintained quantity: op over a lifted source column, in a dtype.

    source: ``"v"`` (the value), ``"one"`` (1 per tuple) or ``"v2"`` (value squared).
    dtype: ``"i8"`` or ``"f8"``.
    """

    op: int
    source: str
    dtype: str

    @property
    def invertible(self) -> bool:
        return self.op == OP_SUM

    @property
    def selective(self) -> bool:
        """combine(a, b) is always a or b (SlickDeque Non-Inv's requirement)."""
        return self.op in (OP_MIN, OP_MAX)

    @property
    def np_dtype(self):
        return np.dtype(np.int64) if self.dtype == "i8" else np.dtype(np.float64)

    def identity(self):
        """(hi, lo) identity element of this primitive."""
        if self.op == OP_SUM:
            return (0, 0) if self.dtype == "i8" else (0.0, 0.0)
        if self.dtype == "i8":
            return (INT64_MAX, 0) if self.op == OP_MIN else (INT64_MIN, 0)
        return (math.inf, 0.0) if self.op == OP_MIN else (-math.inf, 0.0)

    def identity_arrays(self, n: int):
        ih, il = self.identity()
        dt = self.np_dtype
        return np.full(n, ih, dtype=dt), np.full(n, il, dtype=dt)

    def lift(self, values: np.ndarray):
        """Per-tuple (hi, lo) columns for a batch of raw values."""
        n = values.shape[0]
        dt = self.np_dtype
        if self.source == "one":
            return np.ones(n, dtype=dt), np.zeros(n, dtype=dt)
        if self.source == "v":
            return values.astype(dt, copy=False), np.zeros(n, dtype=dt)
        v = values.astype(np.float64)
        hi = np.empty(n, dtype=np.float64)
        lo = np.empty(n, dtype=np.float64)
        lift_square(v, hi, lo)
        return hi, lo

    def __str__(self):
        return f"{OP_NAMES[self.op]}({self.source}):{self.dtype}"


# ----------------------------------------------------------------------------- aggregates
@dataclass(frozen=True)
class Aggregate:
    """An aggregate function: a monoid, plus its decomposition into primitives.

    ``invertible``: an inverse exists (subtract-on-evict, SlickDeque Inv).
    ``selective``: ``combine(a, b)`` always returns one of its arguments (min, max;
    range counts as selective because it is run as its min part and its max part).
    """

    name: str
    invertible: bool
    selective: bool
    _lift: Callable
    _combine: Callable
    _lower: Callable
    _identity: tuple
    _inverse: Callable | None
    _prims: Callable  # is_int -> tuple[Primitive, ...]
    _lower_cols: Callable  # (is_int, list of (hi, lo)) -> np.ndarray
    _int_out: Callable  # is_int -> bool

    # monoid view -------------------------------------------------------------
    def lift(self, x):
        return self._lift(x)

    def combine(self, a, b):
        return self._combine(a, b)

    def lower(self, a):
        return self._lower(a)

    def identity(self):
        return self._identity

    @property
    def has_inverse(self) -> bool:
        return self._inverse is not None

    def inverse(self, a, b):
        """a (-) b: remove the contribution of b from a (only if invertible)."""
        if self._inverse is None:
            raise ValueError(f"aggregate {self.name!r} is not invertible")
        return self._inverse(a, b)

    # primitive view ----------------------------------------------------------
    def primitives(self, is_int: bool) -> tuple[Primitive, ...]:
        return self._prims(is_int)

    def lower_columns(self, is_int: bool, cols) -> np.ndarray:
        """Vectorised lower over answer columns (one (hi, lo) pair per primitive)."""
        return self._lower_cols(is_int, cols)

    def output_is_int(self, is_int: bool) -> bool:
        return self._int_out(is_int)


def _dt(is_int):
    return "i8" if is_int else "f8"


def _dd_to_float(hi, lo):
    return hi + lo


def _int_to_float_div(s, c):
    """int64 sum / count without losing the low bits of sums beyond 2^53."""
    h = s.astype(np.float64)
    # residual of the float conversion, exact in int64 (h is within 2^11 of s for |s|<2^63)
    with np.errstate(over="ignore", invalid="ignore"):
        hi_int = h.astype(np.int64)
    r = (s - hi_int).astype(np.float64)
    return h / c + r / c


def _lower_sum(is_int, cols):
    hi, lo = cols[0]
    return hi.copy() if is_int else _dd_to_float(hi, lo)


def _lower_avg(is_int, cols):
    (sh, sl), (ch, _) = cols
    c = ch.astype(np.float64)
    if is_int:
        return _int_to_float_div(sh, c)
    return (sh + sl) / c


def _lower_stddev(is_int, cols):
    (ch, _), (s1h, s1l), (s2h, s2l) = cols
    out = np.empty(ch.shape[0], dtype=np.float64)
    lower_stddev(ch, s1h, s1l, s2h, s2l, out)
    return out


def _py_std(a):
    c, s, ss = a
    if c == 0:
        return math.nan
    var = (ss * c - s * s) / (c * c)
    return math.sqrt(var) if var > 0 else 0.0


def _minmax(a, b):
    return (min(a[0], b[0]), max(a[1], b[1]))


AGGREGATES: dict[str, Aggregate] = {}


def _register(a: Aggregate):
    AGGREGATES[a.name] = a
    return a


SUM = _register(
    Aggregate(
        "sum",
        True,
        False,
        _lift=lambda x: (x,),
        _combine=lambda a, b: (a[0] + b[0],),
        _lower=lambda a: a[0],
        _identity=(0,),
        _inverse=lambda a, b: (a[0] - b[0],),
        _prims=lambda i: (Primitive(OP_SUM, "v", _dt(i)),),
        _lower_cols=_lower_sum,
        _int_out=lambda i: i,
    )
)
COUNT = _register(
    Aggregate(
        "count",
        True,
        False,
        _lift=lambda x: (1,),
        _combine=lambda a, b: (a[0] + b[0],),
        _lower=lambda a: a[0],
        _identity=(0,),
        _inverse=lambda a, b: (a[0] - b[0],),
        _prims=lambda i: (Primitive(OP_SUM, "one", "i8"),),
        _lower_cols=lambda i, cols: cols[0][0].copy(),
        _int_out=lambda i: True,
    )
)
MIN = _register(
    Aggregate(
        "min",
        False,
        True,
        _lift=lambda x: (x,),
        _combine=lambda a, b: (min(a[0], b[0]),),
        _lower=lambda a: a[0],
        _identity=(math.inf,),
        _inverse=None,
        _prims=lambda i: (Primitive(OP_MIN, "v", _dt(i)),),
        _lower_cols=lambda i, cols: cols[0][0].copy(),
        _int_out=lambda i: i,
    )
)
MAX = _register(
    Aggregate(
        "max",
        False,
        True,
        _lift=lambda x: (x,),
        _combine=lambda a, b: (max(a[0], b[0]),),
        _lower=lambda a: a[0],
        _identity=(-math.inf,),
        _inverse=None,
        _prims=lambda i: (Primitive(OP_MAX, "v", _dt(i)),),
        _lower_cols=lambda i, cols: cols[0][0].copy(),
        _int_out=lambda i: i,
    )
)
RANGE = _register(
    Aggregate(
        "range",
        False,
        True,
        _lift=lambda x: (x, x),
        _combine=_minmax,
        _lower=lambda a: a[1] - a[0],
        _identity=(math.inf, -math.inf),
        _inverse=None,
        _prims=lambda i: (Primitive(OP_MIN, "v", _dt(i)), Primitive(OP_MAX, "v", _dt(i))),
        _lower_cols=lambda i, cols: cols[1][0] - cols[0][0],
        _int_out=lambda i: i,
    )
)
AVG = _register(
    Aggregate(
        "avg",
        True,
        False,
        _lift=lambda x: (x, 1),
        _combine=lambda a, b: (a[0] + b[0], a[1] + b[1]),
        _lower=lambda a: a[0] / a[1] if a[1] else math.nan,
        _identity=(0, 0),
        _inverse=lambda a, b: (a[0] - b[0], a[1] - b[1]),
        _prims=lambda i: (Primitive(OP_SUM, "v", _dt(i)), Primitive(OP_SUM, "one", "i8")),
        _lower_cols=_lower_avg,
        _int_out=lambda i: False,
    )
)
STDDEV = _register(
    Aggregate(
        "stddev",
        True,
        False,
        _lift=lambda x: (1, x, x * x),
        _combine=lambda a, b: (a[0] + b[0], a[1] + b[1], a[2] + b[2]),
        _lower=_py_std,
        _identity=(0, 0, 0),
        _inverse=lambda a, b: (a[0] - b[0], a[1] - b[1], a[2] - b[2]),
        _prims=lambda i: (
            Primitive(OP_SUM, "one", "i8"),
            Primitive(OP_SUM, "v", "f8"),
            Primitive(OP_SUM, "v2", "f8"),
        ),
        _lower_cols=_lower_stddev,
        _int_out=lambda i: False,
    )
)


def _check_query_aggregates() -> None:
    """The executors run exactly the aggregates a query may ask for (``placement.queries``):
    a name accepted by validation but unknown here would crash a live run."""
    from placement.queries import AGGREGATES as NAMES
    from placement.queries import INVERTIBLE_AGGREGATES, SELECTIVE_AGGREGATES

    if set(AGGREGATES) != set(NAMES):
        raise ImportError(
            f"executors.aggregates registers {sorted(AGGREGATES)} but "
            f"placement.queries.AGGREGATES is {sorted(NAMES)}"
        )
    if {a for a, g in AGGREGATES.items() if g.invertible} != set(INVERTIBLE_AGGREGATES) or {
        a for a, g in AGGREGATES.items() if g.selective
    } != set(SELECTIVE_AGGREGATES):
        raise ImportError(
            "executors.aggregates: invertible/selective flags differ from placement.queries"
        )


_check_query_aggregates()

ALIASES = {"mean": "avg", "average": "avg", "std": "stddev", "stdev": "stddev"}


def get_aggregate(name: str | Aggregate) -> Aggregate:
    """Look an aggregate up by name (case-insensitive; 'mean'/'std' aliases accepted)."""
    if isinstance(name, Aggregate):
        return name
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    try:
        return AGGREGATES[key]
    except KeyError:
        raise ValueError(f"unknown aggregate {name!r}; known: {sorted(AGGREGATES)}") from None


def require_selective(agg: Aggregate, technique: str = "slickdeque_noninv") -> None:
    """SlickDeque Non-Inv only works when combine(a, b) is a or b."""
    if not agg.selective:
        raise ValueError(
            f"{technique} needs an aggregate whose combine returns one of its arguments "
            f"(min, max, range); {agg.name!r} is not"
        )


def require_invertible(agg: Aggregate, technique: str) -> None:
    if not agg.invertible:
        raise ValueError(
            f"{technique} needs an invertible aggregate (sum, count, avg, stddev); "
            f"{agg.name!r} is not invertible"
        )
