"""``weaveplace data ...``: DEBS data files (convert a text file to Parquet once).

Why a module of its own: file tooling over the DEBS readers (``cluster.debs.reader``), not
planning or running; generation is ``python -m sim.debs generate``.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from placement.messages import short_repr
from sim.cli.base import UserError, console

data_app = typer.Typer(no_args_is_help=True, help="DEBS data files: convert text to Parquet.")


@data_app.command("convert")
def data_convert(
    src: Path = typer.Argument(..., metavar="IN", help="DEBS 2012 text file (TSV, CRLF)."),
    dest: Path = typer.Argument(..., metavar="OUT.parquet", help="DEBS Parquet to write."),
    rejects: Path | None = typer.Option(
        None, help="Malformed lines (line, reason, raw); default: OUT.rejects.tsv."
    ),
    extra_columns: str = typer.Option(
        "reject",
        "--extra-columns",
        help="A trailing 57th field: reject (the line) or ignore "
        "(drop the field), as data.extra_columns.",
    ),
):
    """Convert a DEBS text file to DEBS Parquet once (same rules as a live run's reader)."""
    from rich.markup import escape
    from rich.progress import DownloadColumn, TransferSpeedColumn

    from cluster.debs.format import EXTRA_COLUMNS_CHOICES
    from cluster.debs.reader import convert_debs, is_parquet_name

    if extra_columns not in EXTRA_COLUMNS_CHOICES:
        raise UserError(
            f"--extra-columns: {short_repr(extra_columns)}; allowed: {', '.join(EXTRA_COLUMNS_CHOICES)}"
        )
    if not src.is_file():
        raise UserError(f"IN: file not found: {src}")
    if is_parquet_name(src.name):
        raise UserError(f"IN: {src} is already Parquet (.parquet/.pq); convert reads DEBS text")
    if not is_parquet_name(dest.name):
        raise UserError(f"OUT: {dest}: the output name must end in .parquet or .pq")
    if dest.resolve() == src.resolve():
        raise UserError("OUT: the same file as IN")
    if not dest.parent.is_dir():
        raise UserError(f"OUT: directory not found: {dest.parent}")
    rejects = rejects or dest.with_name(dest.name.rsplit(".", 1)[0] + ".rejects.tsv")
    size = src.stat().st_size
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(f"converting {src.name}", total=size)
        stats = convert_debs(
            src,
            dest,
            rejects_path=rejects,
            extra_columns=extra_columns,
            progress=lambda done: bar.update(task, completed=done),
        )
    extra = []
    if stats.glued_lines:
        extra.append(f"{stats.glued_lines:,} glued lines split")
    if stats.extra_column_lines:
        extra.append(f"{stats.extra_column_lines:,} extra columns dropped")
    if stats.header_lines:
        extra.append(f"{stats.header_lines} header line skipped")
    console.print(
        f"{escape(str(dest))}: {stats.rows_read:,} rows from {stats.lines:,} lines, "
        f"{stats.rows_rejected:,} rejected ({escape(str(rejects))})"
        + (f"; {', '.join(extra)}" if extra else "")
        + f" in {stats.seconds:.1f} s",
        soft_wrap=True,
    )
