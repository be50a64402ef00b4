"""Sweep bookkeeping as a Hydra callback (configured in ``train.yaml``; no plugin discovery needed).

Jobs of a multirun never abort the sweep: a failing job records ``failed`` in its ``status.json`` and
returns NaN. When the sweep ends, :class:`SweepFate` reads every job's status and fails the command
(non-zero exit) naming each job that did not complete.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from embodirl.fate import read_status

__all__ = ["SweepFate", "sweep_fates"]

log = logging.getLogger(__name__)


def sweep_fates(sweep_dir: Path) -> list[tuple[Path, dict[str, Any] | None]]:
    """``(run_dir, status or None)`` for every job directory under ``sweep_dir`` (those with ``.hydra/``)."""
    runs = sorted({p.parent.parent for p in sweep_dir.rglob(".hydra/overrides.yaml")})
    return [(run, read_status(run)) for run in runs]


class SweepFate(Callback):
    """At the end of a multirun, exit non-zero naming every job that failed or never finished.

    Hydra turns exceptions raised by callbacks into warnings, so this prints the report to stderr and
    raises ``SystemExit(1)``.
    """

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        fates = sweep_fates(sweep_dir)
        bad = [(run, st) for run, st in fates if st is None or st.get("status") != "completed"]
        log.info("sweep %s: %d of %d jobs completed", sweep_dir, len(fates) - len(bad), len(fates))
        if not bad:
            return
        lines = []
        for run, st in bad:
            overrides = " ".join(yaml.safe_load((run / ".hydra" / "overrides.yaml").read_text()) or [])
            what = "no status.json (never started?)" if st is None else st["status"]
            if st and st.get("message"):
                what += f": {st.get('exception')}: {st['message'].splitlines()[0]}"
            lines.append(f"  job {run.relative_to(sweep_dir)} [{overrides}] {what} (see {run / 'status.json'})")
        message = f"{len(bad)} of {len(fates)} sweep jobs did not complete:\n" + "\n".join(lines)
        print(f"embodirl-train: error: {message}", file=sys.stderr)
        raise SystemExit(1)
