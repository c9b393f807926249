"""Rich tables for the CLI."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from .rows import Row, Skip
from .suites import DeviceSummary


def device_table(dev: DeviceSummary) -> Table:
    t = Table(title="device", show_header=False)
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row("name", dev.name)
    t.add_row("compute capability", f"{dev.cc[0]}.{dev.cc[1]} (sm_{dev.arch})")
    t.add_row("SMs", str(dev.sm_count))
    t.add_row("L2", f"{dev.l2_bytes / 2**20:.0f} MiB")
    t.add_row("memory", f"{dev.total_mem / 2**30:.1f} GiB ({dev.free_mem / 2**30:.1f} GiB free)")
    return t


def section_table(title: str, rows: list[Row | Skip]) -> Table:
    t = Table(title=title)
    t.add_column("measure")
    t.add_column("value", justify="right")
    t.add_column("unit")
    t.add_column("how", style="dim")
    for r in rows:
        if isinstance(r, Skip):
            t.add_row(r.metric, "-", "", f"[yellow]skipped: {r.reason}[/yellow]")
        else:
            fmt = f"{r.value:,.2f}" if r.value < 100 else f"{r.value:,.0f}"
            t.add_row(r.label, fmt, r.unit, r.detail)
    return t


def print_section(console: Console, title: str, rows: list[Row | Skip]) -> None:
    console.print(section_table(title, rows))
