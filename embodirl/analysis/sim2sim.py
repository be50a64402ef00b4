"""The sim-to-sim report of ``embodirl-eval export=DIR``: rows side by side, and each gap beyond noise named.

Rows are evaluations (``eval/*`` metrics with a ``policy`` and an ``env`` in words): the checkpoint in its training
env, the export there, and the export in a second env. Two rows differ by more than noise when the 95 % interval of
their difference excludes zero: Newcombe's score interval for success rates, Welch's normal interval for mean
returns (:mod:`embodirl.analysis.stats`); such a gap is a mismatch. The episodes are independent samples to these
intervals; the first two rows share their starts (one seed), so there the interval is conservative.
"""

from __future__ import annotations

from typing import Any

from embodirl.analysis.stats import mean_difference_interval, rate_difference_interval, wilson_interval
from embodirl.runtime.formatting import output_console

__all__ = ["CONFIDENCE", "RATE_METHOD", "RETURN_METHOD", "compare", "failure_line", "print_sim2sim"]

CONFIDENCE = 0.95
RATE_METHOD = "Newcombe's hybrid score interval (Wilson), 95 %"
RETURN_METHOD = "Welch's normal interval, 95 %"


def compare(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The export against the checkpoint (rows 0, 1) and, with a third row, the second env against the training
    env (rows 1, 2): per metric the difference, its 95 % interval and whether it excludes zero (a mismatch)."""
    pairs = [("export vs checkpoint in the training env", rows[1], rows[0])]
    if len(rows) > 2:
        pairs.append((f"export in {rows[2]['env']} vs in the training env", rows[2], rows[1]))
    out = []
    for name, a, b in pairs:
        n_a, n_b = int(a["eval/num_episodes"]), int(b["eval/num_episodes"])
        found = []
        if a.get("eval/success_rate") is not None and b.get("eval/success_rate") is not None:
            wins_a, wins_b = round(a["eval/success_rate"] * n_a), round(b["eval/success_rate"] * n_b)
            found.append(("eval/success_rate", RATE_METHOD,
                          rate_difference_interval(wins_a, n_a, wins_b, n_b, CONFIDENCE)))
        found.append(("eval/return_mean", RETURN_METHOD,
                      mean_difference_interval(a["eval/return_mean"], a["eval/return_std"], n_a,
                                               b["eval/return_mean"], b["eval/return_std"], n_b, CONFIDENCE)))
        for metric, method, (low, high) in found:
            difference = a[metric] - b[metric]
            mismatch = low > 0 or high < 0
            text = (f"{name}: {metric} {a[metric]:.4g} vs {b[metric]:.4g}, difference {difference:+.4g} "
                    f"[{low:+.4g}, {high:+.4g}] ({method}): {'MISMATCH' if mismatch else 'within noise'}")
            out.append({"comparison": name, "metric": metric, "a": a[metric], "b": b[metric],
                        "difference": difference, "interval": [low, high], "method": method, "mismatch": mismatch,
                        "text": text})
    return out


EXPORT_FIX = ("export it again from the run (embodirl-export run=<run dir> out=<a new directory>) and check that; "
              "the checkpoint and its export run the same episodes, so a gap that stays is a bug of the export")
TRANSFER_FIX = ("the export matches its checkpoint, the policy does not transfer: train with env.randomize over "
                "what differs in that env (docs/guides/domain-randomization.md), export again and check again")


def failure_line(comparisons: list[dict[str, Any]]) -> str | None:
    """One line for a failed check: the first mismatch (what differed, by how much, its interval), how many more,
    and the fix for its kind (a gap of the export to its checkpoint, or of the policy to the second env); None
    when every gap is within noise."""
    mismatches = [c for c in comparisons if c["mismatch"]]
    if not mismatches:
        return None
    first = mismatches[0]
    low, high = first["interval"]
    more = f"; {len(mismatches) - 1} more in eval.json's mismatches" if len(mismatches) > 1 else ""
    fix = EXPORT_FIX if first["comparison"] == comparisons[0]["comparison"] else TRANSFER_FIX
    return (f"sim-to-sim check failed: {first['comparison']}: {first['metric']} {first['a']:.4g} vs {first['b']:.4g} "
            f"differs by {first['difference']:+.4g} (95 % interval [{low:+.4g}, {high:+.4g}] excludes zero){more}. "
            f"Fix: {fix}")


def print_sim2sim(result: dict[str, Any]) -> None:
    """The side-by-side table (one row per policy and env) and one line per comparison."""
    from rich.table import Table

    console = output_console()
    table = Table(title=f"embodirl-eval export={result['export']}", title_justify="left")
    for column in ("policy", "env", "success rate [95 % Wilson]", "return mean ± std", "episodes"):
        table.add_column(column, justify="left" if column in ("policy", "env") else "right")
    for row in result["rows"]:
        n, rate = int(row["eval/num_episodes"]), row.get("eval/success_rate")
        success = "-"
        if rate is not None:
            low, high = wilson_interval(round(rate * n), n, CONFIDENCE)
            success = f"{rate:.3f} [{low:.3f}, {high:.3f}]"
        table.add_row(row["policy"], row["env"], success,
                      f"{row['eval/return_mean']:.4g} ± {row['eval/return_std']:.3g}", str(n))
    console.print(table)
    console.print(f"conditions: {result['conditions']}; seed {result['seed']}", soft_wrap=True, highlight=False)
    for comparison in result["comparisons"]:
        console.print(comparison["text"], soft_wrap=True, highlight=False)
