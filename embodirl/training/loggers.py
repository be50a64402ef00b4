"""Where metrics go: metrics.jsonl, TensorBoard, Weights & Biases and the console.

Metric families (each documented once, in docs/guides/metrics.md): ``episode/*`` training episodes finished
in the iteration, ``loss/*`` and ``diag/*`` from the algorithm, ``train/*`` the scheduled hyperparameters in
effect (learning rate, entropy weight), ``eval/*`` deterministic evaluation,
``perf/*`` timings; plus ``iteration``, ``env_steps``, ``wall_time_s`` and ``sps``.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import os
import re
import time
from pathlib import Path
from typing import Any, Literal

from embodirl.config.training import LoggerConfig, WandbConfig
from embodirl.errors import ConfigError
from embodirl.training.console import ConsoleLogger, StopGoal
from embodirl.training.hparams import HParam, read_overrides, tb_run_name
from embodirl.training.hparams import hparams as run_hparams

__all__ = ["ConsoleLogger", "JsonlLogger", "LoggerError", "Loggers", "MetricLoggers", "StopGoal", "TensorBoardLogger",
           "WandbLogger", "build_loggers", "config_markdown", "gif_bytes", "wandb_mode"]

log = logging.getLogger(__name__)

WandbMode = Literal["online", "offline", "disabled"]
WANDB_MODES: tuple[WandbMode, ...] = ("online", "offline", "disabled")


class LoggerError(RuntimeError):
    """A metric logger (TensorBoard, wandb, console) failed; the message names it and how to turn it off."""


def wandb_mode(cfg: WandbConfig) -> WandbMode:
    """``logger.wandb.mode`` when set, else the ``WANDB_MODE`` environment variable, else ``online``.

    Raises:
        ConfigError: ``WANDB_MODE`` holds a mode wandb does not know.
    """
    if cfg.mode is not None:
        return cfg.mode
    env_mode = os.environ.get("WANDB_MODE")
    if env_mode is None:
        return "online"
    env_mode = {"dryrun": "offline", "run": "online"}.get(env_mode, env_mode)  # wandb's old aliases
    for mode in WANDB_MODES:
        if env_mode == mode:
            return mode
    raise ConfigError("WANDB_MODE", os.environ.get("WANDB_MODE"), "online, offline or disabled (environment variable)",
                      "export WANDB_MODE=offline, or pass logger.wandb.mode=offline", absolute=True)


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _with_path(exc: OSError, path: Path) -> OSError:
    """The same OS error naming ``path`` (a failed ``write`` on an open file does not say which file)."""
    return exc if exc.filename else type(exc)(exc.errno, exc.strerror, str(path))


def _line_env_steps(line: bytes) -> int | None:
    """The ``env_steps`` of one ``metrics.jsonl`` line, or None for a torn, non-UTF-8 or foreign line."""
    try:
        steps = json.loads(line.decode("utf-8"))["env_steps"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        return None
    return steps if isinstance(steps, int) and not isinstance(steps, bool) else None


class JsonlLogger:
    """One JSON object per iteration in ``metrics.jsonl``, each appended with a single write.

    A run that starts at ``start_env_steps`` (0 for a fresh start, the checkpoint's count on resume)
    first drops the lines past it (written by an earlier attempt after its last checkpoint, so about
    to be redone) and unreadable ones (torn by a crash, not UTF-8). Nothing is lost: dropped lines are
    appended, as they were, to ``metrics.superseded.jsonl`` beside it.
    """

    def __init__(self, path: Path, start_env_steps: int = 0) -> None:
        from embodirl.runtime.files import open_append

        self.path = path
        try:  # never through a link: a planted metrics.jsonl -> ~/secret must not be read, nor appended to
            with open_append(path) as file:
                file.seek(0)
                existing = file.read()
            self._drop_lines_after(existing, start_env_steps)
            self._file = io.TextIOWrapper(open_append(path), encoding="utf-8", write_through=True)
        except OSError as exc:
            raise _with_path(exc, path) from None

    def _drop_lines_after(self, existing: bytes, env_steps: int) -> None:
        from embodirl.runtime.files import atomic_write_bytes, open_append

        kept: list[bytes] = []
        dropped: list[bytes] = []
        for line in existing.splitlines(keepends=True):
            steps = _line_env_steps(line)
            (kept if steps is not None and steps <= env_steps else dropped).append(line)
        if not dropped:
            return
        log.info("%s: %d line(s) past env_steps=%d or unreadable moved to %s", self.path, len(dropped), env_steps,
                 self.path.with_suffix(".superseded.jsonl").name)
        with open_append(self.path.with_suffix(".superseded.jsonl")) as aside:
            aside.writelines(line if line.endswith(b"\n") else line + b"\n" for line in dropped)
        atomic_write_bytes(self.path, b"".join(line if line.endswith(b"\n") else line + b"\n" for line in kept))

    def log(self, record: dict[str, Any]) -> None:
        clean = {k: _finite_or_none(v) for k, v in record.items()}
        try:
            self._file.write(json.dumps(clean) + "\n")
            self._file.flush()
        except OSError as exc:
            raise _with_path(exc, self.path) from None

    def close(self) -> None:
        self._file.close()


def _wait_for_a_later_second(log_dir: Path) -> None:
    """Return once the clock's second is past every event file's in ``log_dir``.

    TensorBoard reads a directory's event files in the order of their names,
    ``events.out.tfevents.<second>.<host>.<pid>.<counter>``, and a resumed run's ``purge_step`` hides earlier
    events only when its file is read after theirs. Within one second the names compare pid and counter as
    text (``10`` sorts before ``9``), so a run continued within the second could be read first and lose points.
    """
    seconds = [int(m.group(1)) for f in log_dir.glob("events.out.tfevents.*")
               if (m := re.match(r"events\.out\.tfevents\.(\d+)\.", f.name))]
    latest, now = max(seconds, default=-1), time.time()
    if int(now) <= latest < now + 2:  # a file stamped by a clock far ahead (another host) is not waited for
        time.sleep(latest + 1 - now)


class TensorBoardLogger:
    """Scalars against ``env_steps`` in TensorBoard event files under ``tb/``, with the run's hyperparameters (the
    HParams dashboard), its config (the Text dashboard) and its evaluation videos (animated GIFs, Images dashboard).

    A record's scalars go out as one event (one ``Summary`` holding every value, as TensorFlow's merged
    summaries do): TensorBoard reads each tag as usual, and a record is built, serialized, checksummed and
    queued once instead of once per scalar (``add_scalar``).

    Only the session-start half of the HParams data is written (no experiment summary): TensorBoard then builds the
    comparison of a sweep from every run's values and finds the metrics among the runs' scalars (``eval/*`` ...).
    """

    def __init__(self, log_dir: Path, purge_step: int | None = None, hparams: dict[str, HParam] | None = None,
                 config_text: str | None = None) -> None:
        """Write into ``log_dir``; with ``purge_step``, TensorBoard hides the events of earlier files in it at
        steps >= ``purge_step`` (``SummaryWriter``'s ``purge_step``: a session-start event at that step).
        ``hparams`` (name -> value) and ``config_text`` (markdown) are written once, at step 0."""
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.plugins.hparams.summary_v2 import hparams_pb
        from torch.utils.tensorboard import SummaryWriter

        self._summary, self._value = Summary, Summary.Value
        _wait_for_a_later_second(Path(log_dir))
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)
        events = self.writer.file_writer
        if events is None:  # SummaryWriter opens its event file when it is built
            raise RuntimeError(f"TensorBoard opened no event file in {log_dir}")
        self._events: Any = events
        if hparams:
            self._events.add_summary(hparams_pb(hparams), 0)
        if config_text is not None:
            self.writer.add_text("config", config_text, 0)

    def log(self, record: dict[str, Any]) -> None:
        value = self._value
        scalars = [value(tag=key, simple_value=x) for key, x in record.items()
                   if "/" in key and isinstance(x, int | float) and math.isfinite(x)]
        scalars.append(value(tag="perf/sps", simple_value=record["sps"]))
        self._events.add_summary(self._summary(value=scalars), record["env_steps"])

    def log_video(self, tag: str, frames: Any, path: Path, step: int, fps: int) -> None:
        """The video as an animated GIF image (what ``add_video`` writes, without needing moviepy): the saved file
        when it is a GIF, else the frames encoded with Pillow."""
        height, width = frames.shape[1:3]
        gif = path.read_bytes() if path.suffix == ".gif" else gif_bytes(frames, fps)
        image = self._summary.Image(height=height, width=width, colorspace=3, encoded_image_string=gif)
        self._events.add_summary(self._summary(value=[self._value(tag=tag, image=image)]), step)

    def close(self) -> None:
        self.writer.close()


def gif_bytes(frames: Any, fps: int) -> bytes:
    """``[T, H, W, 3]`` uint8 frames as an animated GIF that loops (Pillow)."""
    from PIL import Image

    images = [Image.fromarray(frame) for frame in frames]
    buffer = io.BytesIO()
    images[0].save(buffer, format="GIF", save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0)
    return buffer.getvalue()


class WandbLogger:
    """Weights & Biases run whose id derives from the run directory, so a requeued job continues it.

    Args:
        run_dir: The run directory (wandb writes under ``<run_dir>/wandb``).
        config: The resolved run config.
        settings: The ``logger.wandb`` node; ``name``/``group`` None take ``default_name``/``default_group``.
        default_name: E.g. ``ppo-cartpole-seed0`` (plus the sweep overrides in a multirun).
        default_group: E.g. the sweep directory of a multirun, else ``<algo>-<env>``.
    """

    def __init__(self, run_dir: Path, config: dict, settings: WandbConfig, default_name: str,
                 default_group: str) -> None:
        import wandb

        run_id = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:16]
        self.run = wandb.init(
            project=settings.project, entity=settings.entity, mode=wandb_mode(settings),
            group=settings.group or default_group, tags=list(settings.tags), config=config,
            dir=str(run_dir), id=run_id, resume="allow", name=settings.name or default_name,
            settings=wandb.Settings(silent=True, init_timeout=60),
        )

    def log(self, record: dict[str, Any]) -> None:
        clean = {k: v for k, v in record.items() if isinstance(v, int | float) and math.isfinite(v)}
        self.run.log(clean, step=record["env_steps"])

    def log_video(self, tag: str, frames: Any, path: Path, step: int, fps: int) -> None:
        import wandb

        self.run.log({tag: wandb.Video(str(path), format="gif" if path.suffix == ".gif" else "mp4")}, step=step)

    def close(self) -> None:
        self.run.finish()


_DISABLE = {"TensorBoardLogger": "logger.tensorboard=false", "WandbLogger": "logger.wandb.enabled=false",
            "ConsoleLogger": "logger.console=none"}


class MetricLoggers:
    """Fans one record out to every logger.

    A logger's OS error (disk full, unwritable file) passes through naming its path; any other error
    becomes a :class:`LoggerError` naming the logger and the override that turns it off.
    """

    def __init__(self, loggers: list[Any]) -> None:
        self.loggers = loggers

    def _call(self, logger: Any, method: str, *args: Any) -> None:
        try:
            getattr(logger, method)(*args)
        except OSError:
            raise
        except Exception as exc:
            name = type(logger).__name__
            fix = _DISABLE.get(name, "check its settings")
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise LoggerError(f"{name}.{method} failed: {type(exc).__name__}: {first}. Fix: correct its settings, "
                              f"or turn it off with {fix}") from exc

    def log(self, record: dict[str, Any]) -> None:
        for logger in self.loggers:
            self._call(logger, "log", record)

    def log_video(self, tag: str, frames: Any, path: Path, step: int, fps: int) -> None:
        """Hand a saved video (frames ``[T, H, W, 3]`` uint8 and its file) to loggers that show videos."""
        for logger in self.loggers:
            if hasattr(logger, "log_video"):
                self._call(logger, "log_video", tag, frames, path, step, fps)

    def note_stop_condition(self, condition: str) -> None:
        """Tell loggers that show why a run ended (the console) which ``trainer.stop_on`` condition held."""
        for logger in self.loggers:
            if hasattr(logger, "note_stop_condition"):
                logger.note_stop_condition(condition)

    def close(self) -> None:
        for logger in self.loggers:
            self._call(logger, "close")

    def close_quietly(self) -> None:
        """Close while another error is propagating: a second failure is only logged."""
        try:
            self.close()
        except Exception as exc:
            log.error("closing the metric loggers failed as well: %s: %s", type(exc).__name__, exc)


class Loggers:
    """Where the run's metrics go (the ``logger`` node), opened by the trainer once it knows its first env step.

    Args:
        cfg: The ``logger`` node.
        run_dir: The run directory.
        config: The resolved run config (for wandb).
        goal: The run's budget and stop conditions, for the console.
        run_name: Default wandb ``(name, group)``; the name also labels the progress line.
        enabled: Rank 0 writes metrics; other ranks' loggers write nothing.

    Raises:
        ConfigError: ``logger.wandb.enabled`` with a ``WANDB_MODE`` wandb does not know (before training).
    """

    def __init__(self, cfg: LoggerConfig, *, run_dir: Path, config: dict, goal: StopGoal,
                 run_name: tuple[str, str] = ("", ""), enabled: bool = True) -> None:
        if cfg.wandb.enabled:
            wandb_mode(cfg.wandb)
        self.cfg, self.run_dir, self.config, self.goal = cfg, Path(run_dir), config, goal
        self.run_name, self.enabled = run_name, enabled

    def open(self, start_env_steps: int) -> MetricLoggers:
        """The loggers of a run starting at ``start_env_steps`` (0 fresh, the checkpoint's count on resume)."""
        if not self.enabled:
            return MetricLoggers([])
        return build_loggers(self.run_dir, self.cfg, self.config, self.goal, start_env_steps, *self.run_name)


def build_loggers(run_dir: Path, cfg: LoggerConfig, config_dict: dict, goal: StopGoal, start_env_steps: int,
                  wandb_name: str = "", wandb_group: str = "") -> MetricLoggers:
    """Loggers from the ``logger`` node (console, TensorBoard, wandb) plus metrics.jsonl.

    Args:
        run_dir: The run directory.
        cfg: The ``logger`` node.
        config_dict: The resolved run config (for wandb).
        goal: The budget and the stop conditions the progress line shows.
        start_env_steps: 0 for a fresh start, the checkpoint's env steps on resume: metric lines and
            TensorBoard events past it, left by an earlier attempt, are superseded.
        wandb_name: Default wandb run name; also the progress bar's label (``ppo-cartpole-seed0``).
        wandb_group: Default wandb group.
    """
    jsonl = JsonlLogger(run_dir / "metrics.jsonl", start_env_steps)
    writers: list[Any] = []
    if cfg.tensorboard:
        overrides = read_overrides(run_dir)
        name = tb_run_name(overrides)  # a sweep job's run is named by its varying overrides
        tb_dir = run_dir / "tb" / name if name else run_dir / "tb"
        earlier = tb_dir.is_dir() and any(tb_dir.glob("events.out.tfevents.*"))
        # TensorBoard hides the earlier events at and after purge_step: those past the checkpoint, exactly the
        # lines JsonlLogger drops, while the checkpoint's own step stays (it is not logged again).
        writers.append(_checked(TensorBoardLogger, tb_dir, start_env_steps + 1 if earlier else None,
                                run_hparams(config_dict, overrides), config_markdown(config_dict)))
    if cfg.wandb.enabled:
        writers.append(_checked(WandbLogger, run_dir, config_dict, cfg.wandb, wandb_name, wandb_group))
    # Built last, so that its clock (the steps/s it shows) starts with training, not before the writers' set-up.
    console = ConsoleLogger(goal, cfg.console, cfg.console_every_s, start_env_steps, wandb_name or "train")
    return MetricLoggers([jsonl, console, *writers])


def config_markdown(config: dict) -> str:
    """The resolved config as a YAML code block (TensorBoard's Text dashboard renders markdown)."""
    import yaml

    text = yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    return "\n".join("    " + line for line in text.splitlines())


def _checked(cls: type, *args: Any) -> Any:
    """Construct a logger; a failure other than an OS error becomes a one-line :class:`LoggerError`."""
    try:
        return cls(*args)
    except (OSError, ConfigError):
        raise
    except Exception as exc:
        raise LoggerError(f"{cls.__name__} could not start: {type(exc).__name__}: "
                          f"{(str(exc).strip().splitlines() or [''])[0]}. Fix: correct its settings, or turn it "
                          f"off with {_DISABLE.get(cls.__name__, 'its option')}") from exc
