"""Where metrics go: metrics.jsonl, TensorBoard, Weights & Biases and the console.

Metric families (each documented once, in README "Metrics"): ``episode/*`` training episodes finished
in the iteration, ``loss/*`` and ``diag/*`` from the algorithm, ``eval/*`` deterministic evaluation,
``perf/*`` timings; plus ``iteration``, ``env_steps``, ``wall_time_s`` and ``sps``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["ConsoleLogger", "JsonlLogger", "MetricLoggers", "TensorBoardLogger", "WandbLogger", "build_loggers"]

log = logging.getLogger(__name__)


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JsonlLogger:
    """One JSON object per iteration in ``metrics.jsonl``, each appended with a single write.

    On resume, lines past the checkpoint's ``env_steps`` (written after the last checkpoint, so
    about to be redone) are dropped first, atomically.
    """

    def __init__(self, path: Path, resume_env_steps: int | None = None) -> None:
        self.path = path
        if resume_env_steps is not None and path.exists():
            from embodirl.checkpoint import atomic_write_bytes

            kept = []
            for line in path.read_text().splitlines():
                try:
                    if json.loads(line)["env_steps"] <= resume_env_steps:
                        kept.append(line)
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue  # a torn last line from a crash
            atomic_write_bytes(path, "".join(line + "\n" for line in kept).encode())
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def log(self, record: dict[str, Any]) -> None:
        clean = {k: _finite_or_none(v) for k, v in record.items()}
        self._file.write(json.dumps(clean) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardLogger:
    """Scalars against ``env_steps`` in TensorBoard event files under ``tb/``."""

    def __init__(self, log_dir: Path, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)

    def log(self, record: dict[str, Any]) -> None:
        step = record["env_steps"]
        for key, value in record.items():
            if "/" in key and isinstance(value, int | float) and math.isfinite(value):
                self.writer.add_scalar(key, value, step)
        self.writer.add_scalar("perf/sps", record["sps"], step)

    def log_video(self, tag: str, frames: Any, path: Path, step: int, fps: int) -> None:
        """TensorBoard encodes videos with moviepy; without it, the first and last frames go in as images."""
        import importlib.util

        import torch

        video = torch.from_numpy(frames).permute(0, 3, 1, 2).unsqueeze(0)  # [1, T, C, H, W]
        if importlib.util.find_spec("moviepy") is not None:
            self.writer.add_video(tag, video, step, fps=fps)
        else:
            self.writer.add_images(f"{tag}_first_last", video[0, [0, -1]], step)

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    """Weights & Biases run whose id derives from the run directory, so a requeued job continues it."""

    def __init__(self, run_dir: Path, config: dict, project: str, entity: str | None, mode: str,
                 group: str | None, tags: list[str]) -> None:
        import wandb

        run_id = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:16]
        self.run = wandb.init(
            project=project, entity=entity, mode=mode, group=group, tags=tags, config=config,
            dir=str(run_dir), id=run_id, resume="allow", name=run_dir.name,
            settings=wandb.Settings(silent=True, init_timeout=60),
        )

    def log(self, record: dict[str, Any]) -> None:
        clean = {k: v for k, v in record.items() if isinstance(v, int | float) and math.isfinite(v)}
        self.run.log(clean, step=record["env_steps"])

    def log_video(self, tag: str, frames: Any, path: Path, step: int, fps: int) -> None:
        import wandb

        self.run.log({tag: wandb.Video(str(path), format=path.suffix.lstrip("."))}, step=step)

    def close(self) -> None:
        self.run.finish()


class ConsoleLogger:
    """A progress bar on a terminal; plain periodic lines otherwise (files, CI, SLURM logs).

    Args:
        total_env_steps: Budget, for the bar and the ETA.
        mode: ``auto`` (bar on a TTY, lines otherwise), ``bar``, ``lines`` or ``none``.
        every_s: Seconds between plain lines.
    """

    def __init__(self, total_env_steps: int, mode: str = "auto", every_s: float = 5.0, start_steps: int = 0) -> None:
        self.total = total_env_steps
        self.mode = ("bar" if sys.stdout.isatty() else "lines") if mode == "auto" else mode
        self.every_s = every_s
        self._last_line = -math.inf
        self._last_return: float | None = None
        self._last_eval: float | None = None
        self._progress = None
        if self.mode == "bar":
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(
                TextColumn("[bold]train"), BarColumn(), TextColumn("{task.completed:,.0f}/{task.total:,.0f} steps"),
                TextColumn("{task.fields[sps]:>7,.0f} sps"), TextColumn("return {task.fields[ret]}"),
                TextColumn("eval {task.fields[eval]}"), TimeRemainingColumn(), transient=False,
            )
            self._task = self._progress.add_task("train", total=total_env_steps, completed=start_steps,
                                                 sps=0.0, ret="-", eval="-")
            self._progress.start()

    def log(self, record: dict[str, Any]) -> None:
        if record.get("episode/return_mean") is not None:
            self._last_return = record["episode/return_mean"]
        if record.get("eval/return_mean") is not None:
            self._last_eval = record["eval/return_mean"]
        ret = "-" if self._last_return is None else f"{self._last_return:.1f}"
        ev = "-" if self._last_eval is None else f"{self._last_eval:.1f}"
        if self._progress is not None:
            self._progress.update(self._task, completed=record["env_steps"], sps=record["sps"], ret=ret, eval=ev)
        elif self.mode == "lines" and time.monotonic() - self._last_line >= self.every_s:
            self._last_line = time.monotonic()
            steps = record["env_steps"]
            eta = (self.total - steps) / record["sps"] if record["sps"] > 0 else float("inf")
            log.info("env_steps %s/%s (%.0f%%) | %.0f sps | return %s | eval %s | ETA %.0fs",
                     f"{steps:,}", f"{self.total:,}", 100 * steps / self.total, record["sps"], ret, ev, eta)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


class MetricLoggers:
    """Fans one record out to every logger."""

    def __init__(self, loggers: list[Any]) -> None:
        self.loggers = loggers

    def log(self, record: dict[str, Any]) -> None:
        for logger in self.loggers:
            logger.log(record)

    def log_video(self, tag: str, frames: Any, path: Path, step: int, fps: int) -> None:
        """Hand a saved video (frames ``[T, H, W, 3]`` uint8 and its file) to loggers that show videos."""
        for logger in self.loggers:
            if hasattr(logger, "log_video"):
                logger.log_video(tag, frames, path, step, fps)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()


def build_loggers(run_dir: Path, cfg: Any, config_dict: dict, total_env_steps: int,
                  resume_env_steps: int | None) -> MetricLoggers:
    """Loggers from the ``logger`` config group (console, TensorBoard, wandb) plus metrics.jsonl."""
    loggers: list[Any] = [
        JsonlLogger(run_dir / "metrics.jsonl", resume_env_steps),
        ConsoleLogger(total_env_steps, cfg.console, cfg.console_every_s, resume_env_steps or 0),
    ]
    if cfg.tensorboard:
        loggers.append(TensorBoardLogger(run_dir / "tb", purge_step=resume_env_steps))
    if cfg.wandb.enabled:
        w = cfg.wandb
        loggers.append(WandbLogger(run_dir, config_dict, w.project, w.entity, w.mode, w.group, list(w.tags)))
    return MetricLoggers(loggers)
