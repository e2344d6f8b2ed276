"""HTML building blocks of the report: one stylesheet, escaping, number cells, tables, page.

Why exact cells: every numeric cell carries the exact value in ``data-value`` (Python ``repr``,
which round-trips) and a ``title`` tooltip, so the page can be checked against the run's files.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;
max-width:1200px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px}
h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 7px}th{background:#f0f0f0;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}
figure{margin:8px 0 20px}figure img{max-width:100%;border:1px solid #ddd}
figcaption{font-size:12px;color:#555}
.warn{background:#fff3cd;border:1px solid #e0c060;padding:8px 12px}
.note{color:#555;font-size:12px}
"""


def esc(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _isnum(v: Any) -> bool:
    return (
        isinstance(v, (int, float))
        and not isinstance(v, bool)
        or type(v).__module__ == "numpy"
        and hasattr(v, "dtype")
        and v.dtype.kind in "iuf"
    )


def fmt(v: Any, kind: str = "g") -> str:
    """Display text of a value: costs ``,.6g``, percentages ``.1f``, seconds ``.4g``."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if not _isnum(v):
        return str(v)
    f = float(v)
    if math.isnan(f):
        return "–"
    if float(f).is_integer() and kind in ("g", "int") and abs(f) < 1e15:
        return f"{int(f):,}"
    if kind == "pct":
        return f"{f:.1f}"
    if kind == "s":
        return f"{f:.4g}"
    if kind == "s2":  # Table 10 style
        return f"{f:.2f}" if f >= 0.01 or f == 0 else f"{f:.1e}"
    if kind == "full":
        return repr(f)
    return f"{f:,.6g}"


def _cell(v: Any, kind: str = "g", field_name: str | None = None) -> str:
    attrs = f' data-field="{esc(field_name)}"' if field_name else ""
    if _isnum(v) and not (isinstance(v, float) and math.isnan(v)):
        f = float(v)
        if not math.isnan(f):
            r = (
                repr(int(v))
                if isinstance(v, int) or (hasattr(v, "dtype") and v.dtype.kind in "iu")
                else repr(f)
            )
            return f'<td class="num" data-value="{r}" title="{r}"{attrs}>{esc(fmt(v, kind))}</td>'
    return f"<td{attrs}>{esc(fmt(v, kind))}</td>"


def html_table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    kinds: Sequence[str] | None = None,
    table_id: str | None = None,
    fields: Sequence[str | None] | None = None,
    row_attrs: Sequence[dict[str, str]] | None = None,
) -> str:
    kinds = kinds or ["g"] * len(headers)
    fields = fields or [None] * len(headers)
    out = [f"<table{f' id={chr(34)}{esc(table_id)}{chr(34)}' if table_id else ''}><thead><tr>"]
    out += [f"<th>{esc(h)}</th>" for h in headers]
    out.append("</tr></thead><tbody>")
    for i, r in enumerate(rows):
        attrs = "".join(f' {k}="{esc(v)}"' for k, v in (row_attrs[i] if row_attrs else {}).items())
        out.append(
            f"<tr{attrs}>" + "".join(_cell(v, k, f) for v, k, f in zip(r, kinds, fields)) + "</tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def page(title: str, body: list[str]) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f'<h1>{esc(title)}</h1><p class="note">generated {stamp} by weaveplace report</p>'
        + "\n".join(body)
        + "</body></html>\n"
    )


def warnings_block(ws: list[str]) -> str:
    if not ws:
        return ""
    items = "".join(f"<li>{esc(w)}</li>" for w in ws[:200])
    more = f"<li>… {len(ws) - 200} more</li>" if len(ws) > 200 else ""
    return f'<div class="warn"><b>Warnings</b><ul>{items}{more}</ul></div>'
