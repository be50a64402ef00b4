"""One-screen console summaries of a training run and of an evaluation."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from embodirl.runtime.formatting import output_console

__all__ = ["print_eval", "print_summary", "print_sweep"]


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def print_summary(summary: dict[str, Any], console: Console | None = None) -> None:
    """Print status, budget, speed, final returns, when it was solved and where the files are."""
    console = console or output_console()
    table = Table(title="embodirl-train summary", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    solved = summary.get("solved_env_steps")
    rows = [
        ("status", f"{summary['status']} ({summary.get('stop_reason') or '-'})"),
        ("env steps", _fmt(summary["env_steps"])),
        ("iterations", _fmt(summary["iterations"])),
        ("wall time", f"{summary['wall_time_s']:.2f} s"),
        ("steps/s (end to end)", _fmt(summary.get("sps"))),
        ("train return (last)", _fmt(summary.get("episode/return_mean"))),
        ("eval return", f"{_fmt(summary.get('eval/return_mean'))} ± {_fmt(summary.get('eval/return_std'))}"),
        ("eval length", _fmt(summary.get("eval/length_mean"))),
    ]
    if summary.get("eval/success_rate") is not None:
        rows.append(("eval success rate", _fmt(summary["eval/success_rate"])))
    rows.append(("solved", "not reached" if solved is None else
                 f"at {_fmt(solved)} env steps, {summary['solved_wall_time_s']:.2f} s "
                 f"({summary.get('solved_metric', 'eval/return_mean')} >= {_fmt(summary.get('solved_threshold'))})"))
    rows += [("run dir", summary["run_dir"]), ("checkpoint", summary["checkpoint"])]
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)


def print_eval(result: dict[str, Any], console: Console | None = None) -> None:
    """Print an evaluation's metrics as a two-column table."""
    console = console or output_console()
    table = Table(title="embodirl-eval", show_header=True, title_justify="left")
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    for key, value in result.items():
        if key != "conditions" and not isinstance(value, dict):  # the sweep has its own table
            table.add_row(key, _fmt(value))
    console.print(table)
    if result.get("conditions"):  # one line, not a cell that wraps: which env conditions the metrics are under
        console.print(f"conditions: {result['conditions']}", soft_wrap=True, highlight=False)
    if result.get("sweep"):
        print_sweep(result["sweep"], console)


def print_sweep(sweep: dict[str, Any], console: Console | None = None) -> None:
    """Print a held-out sweep (``eval.json``'s ``sweep``): one row per value, its success rate and return."""
    console = console or output_console()
    where = f": {sweep['conditions']}" if sweep.get("conditions") else ""
    console.print(f"held-out sweep of {sweep['param']} ({sweep['scale']}){where}", soft_wrap=True, highlight=False)
    table = Table()
    for column in ("value", "eval/success_rate", "eval/return_mean"):
        table.add_column(column, justify="right")
    for row in sweep["bins"]:
        table.add_row(_fmt(row["value"]), _fmt(row.get("eval/success_rate")), _fmt(row.get("eval/return_mean")))
    console.print(table)
