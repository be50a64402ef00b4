"""The run's checkpoints: what one holds, where it goes (``checkpoints/``), how a run comes back from one.

``last.pt`` is rewritten at every save and is what a restarted or requeued job continues from; a periodic
``step_<env_steps>.pt`` is kept beside it when a ``trainer.checkpoint_every_env_steps`` multiple is crossed (the
newest ``trainer.keep_checkpoints`` of them stay); ``best.pt`` holds the state with the best value of
``trainer.best_metric``. Every file is written atomically, these by rank 0 (:mod:`embodirl.runtime.checkpoint`,
which also defines and checks the format).

What differs between the ranks is saved by each rank whenever ``last.pt`` is, marked with its env step count: rank
``r`` (from 1) writes its env, collector and random-number states to ``rank<r>.pt`` (``last.pt`` holds rank 0's),
and every rank of an off-policy algorithm writes its own replay buffer (its own envs' transitions), rank 0 to
``replay.pt``, rank ``r`` to ``replay.rank<r>.pt`` (apart from ``last.pt``, which stays small). On resume each rank
restores them from its own files, so a resumed multi-rank run continues as the uninterrupted one would; a rank
whose file is missing, unreadable or from another save starts fresh episodes or an empty buffer and says so in one
warning line (in its own log, ``train.rank<r>.log``).
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from embodirl.algos.base import Algorithm
from embodirl.collect.collector import Collector
from embodirl.collect.replay import ReplayBuffer
from embodirl.envs.base import env_mode
from embodirl.errors import CheckpointError
from embodirl.runtime.checkpoint import (
    check_optimizer_state,
    load_checkpoint,
    rng_state,
    serialize_checkpoint,
    set_rng_state,
)
from embodirl.runtime.distributed import get_info
from embodirl.runtime.files import atomic_write_bytes
from embodirl.training.state import TrainState

__all__ = ["Checkpointer", "periodic_checkpoints", "rank_file", "replay_file"]

log = logging.getLogger(__name__)

_PERIODIC = re.compile(r"step_(\d+)\.pt")


def rank_file(rank: int) -> str:
    """The name of the file of rank ``rank`` (at least 1) beside ``last.pt``: its env, collector and random-number
    states (``last.pt`` holds rank 0's)."""
    return f"rank{rank}.pt"


def replay_file(rank: int) -> str:
    """The name of rank ``rank``'s replay buffer file beside ``last.pt``: ``replay.pt`` for rank 0 (a single
    process), ``replay.rank<r>.pt`` for the others."""
    return "replay.pt" if rank == 0 else f"replay.rank{rank}.pt"


def periodic_checkpoints(folder: Path) -> dict[int, Path]:
    """``env_steps -> path`` of the periodic checkpoints ``step_<env_steps>.pt`` in ``folder``."""
    found = {}
    for path in folder.glob("step_*.pt"):
        match = _PERIODIC.fullmatch(path.name)
        if match:
            found[int(match.group(1))] = path
    return found


class Checkpointer:
    """Saves the run's state into ``folder`` and restores it on resume.

    Args:
        folder: ``<run_dir>/checkpoints``.
        collector: Its env and collector state are saved (when the env can save its state).
        algo: The algorithm; its policy and its own state (optimizer, counters, normalisers) are saved.
        config: The resolved run config, stored in every checkpoint.
        keep: Periodic checkpoints kept (``trainer.keep_checkpoints``).
        resume: ``trainer.resume``: the checkpoint to start from when ``folder`` has no ``last.pt``.
        is_main: Rank 0, the only one that writes checkpoints, restores the env and the random generators.
        rank: This process's rank (default: the process group's), which names its replay buffer file.
    """

    def __init__(self, folder: Path, *, collector: Collector, algo: Algorithm, config: dict, keep: int,
                 resume: str | None, is_main: bool, rank: int | None = None) -> None:
        self.folder, self.collector, self.algo, self.config = folder, collector, algo, config
        self.keep, self.resume_path, self.is_main = keep, resume, is_main
        self.rank = get_info().rank if rank is None else rank
        assert isinstance(algo.policy, torch.nn.Module)  # build_policy moved it to its device: it is a module
        self.policy: torch.nn.Module = algo.policy

    def state(self, counters: TrainState) -> dict[str, Any]:
        """Everything a resume needs (see :mod:`embodirl.runtime.checkpoint`)."""
        return {
            "config": self.config,
            "policy": self.policy.state_dict(),
            "algo": self.algo.state_dict(),
            "trainer": asdict(counters),
            **self._own_state(),
        }

    def _own_state(self) -> dict[str, Any]:
        """What differs between the ranks: this rank's env and collector state and its random-number states."""
        try:
            env_state = self.collector.env.state_dict()
        except NotImplementedError:
            env_state = None
        return {"env": env_state, "collector": self.collector.state_dict() if env_state is not None else {},
                "rng": rng_state()}

    def save(self, counters: TrainState, periodic: bool = False, best: bool = False) -> list[Path]:
        """Atomically write ``last.pt`` (and a periodic ``step_*.pt``), or only ``best.pt``; prune old periodic
        ones; return the files written.

        Rank 0 only, but every rank writes its own replay buffer with ``last.pt``. Pruning keeps the ``keep``
        highest step counts; periodic checkpoints from beyond a resumed run's start were moved aside when it
        resumed, so they are never counted.
        """
        if not best:
            self._save_replay(counters.env_steps)
            if not self.is_main:
                self._save_rank_state(counters.env_steps)
        if not self.is_main:
            return []
        data = serialize_checkpoint(self.state(counters))
        written = [self.folder / ("best.pt" if best else "last.pt")]
        atomic_write_bytes(written[0], data)
        if periodic and self.keep > 0:
            written.append(self.folder / f"step_{counters.env_steps:012d}.pt")
            atomic_write_bytes(written[1], data)
            for _, old in sorted(periodic_checkpoints(self.folder).items())[: -self.keep]:
                old.unlink()
        return written

    def resume(self, seed: int) -> TrainState | None:
        """Restore the run from ``last.pt`` if present, else from ``resume``; None if neither (a fresh start).

        Args:
            seed: The training env's seed; an env that cannot restore its state restarts its episodes from
                ``seed + iteration``.

        Raises:
            CheckpointError: The file is missing, corrupt, or does not fit this run's policy or algorithm.
        """
        found = self._source()
        if found is None:
            return None
        path, key = found
        saved = load_checkpoint(path, key=key)
        counters = self._load_learner(saved, path, key)
        for name, optimizer in self.algo.optimizers().items():
            check_optimizer_state(optimizer, f"{key}={str(path)!r}", name)
        own = saved if self.is_main else self._load_rank_state(path.parent / rank_file(self.rank), counters.env_steps)
        self._load_env(own, seed + counters.iteration)
        self._load_replay(path.parent / replay_file(self.rank), counters.env_steps)
        if own is not None:
            set_rng_state(own["rng"])
        if self.is_main:
            self.set_aside_after(counters.env_steps)
        log.info("resumed from %s at env_steps=%d (iteration %d)", path, counters.env_steps, counters.iteration)
        return counters

    def _source(self) -> tuple[Path, str] | None:
        """The file to resume from and the key that named it: the run directory's own ``last.pt`` wins."""
        own = self.folder / "last.pt"
        if own.exists():
            if self.resume_path:
                log.info("%s exists: continuing this run directory's own progress (trainer.resume=%s is only used "
                         "to start a run directory that has none)", own, self.resume_path)
            return own, "checkpoint"
        return (Path(self.resume_path), "trainer.resume") if self.resume_path else None

    def _load_learner(self, saved: dict[str, Any], path: Path, key: str) -> TrainState:
        try:
            self.policy.load_state_dict(saved["policy"])
            self.algo.load_state_dict(saved["algo"])
            return TrainState(**saved["trainer"])
        except CheckpointError:
            raise  # the algorithm's own refusal names what differs and the fix
        except (RuntimeError, KeyError, ValueError, TypeError) as exc:
            raise CheckpointError(
                f"{key}={str(path)!r} does not fit this run's policy/algorithm ({str(exc).splitlines()[0]}). "
                "Fix: resume with the same policy, env and algo settings the checkpoint was trained with "
                "(they are stored in the run's .hydra/config.yaml)."
            ) from exc

    def _load_env(self, saved: dict[str, Any] | None, seed: int) -> None:
        """Restore this rank's env and collector from ``saved`` (``last.pt`` on rank 0, its own file on the others;
        None: that file was unusable and said so), or start fresh episodes from ``seed``."""
        env = self.collector.env
        if saved is None:
            self.collector.reset(seed=seed)
            return
        if saved["env"] is not None:
            try:
                with env_mode():  # the mode the env is stepped in (its tensors may be inference tensors)
                    env.load_state_dict(saved["env"])
            except NotImplementedError:  # another env's state (trainer.allow_config_change=true across envs)
                log.warning("%s cannot restore the env state the checkpoint holds: training starts fresh episodes",
                            type(env).__name__)
                self.collector.reset(seed=seed)
                return
            self.collector.load_state_dict(saved["collector"])
            return
        log.warning("%s cannot restore its env state: resumed training starts fresh episodes", type(env).__name__)
        self.collector.reset(seed=seed)

    def _save_rank_state(self, env_steps: int) -> None:
        """Ranks but 0: write this rank's :meth:`_own_state` to its :func:`rank_file`, marked with ``env_steps``."""
        data = io.BytesIO()
        torch.save({"env_steps": env_steps, **self._own_state()}, data)
        atomic_write_bytes(self.folder / rank_file(self.rank), data.getvalue())

    def _load_rank_state(self, file: Path, env_steps: int) -> dict[str, Any] | None:
        """This rank's state from ``file`` when it was saved at ``env_steps``; else one warning line and None."""
        why = f"no {file}"
        if file.is_file():
            try:
                saved = torch.load(file, map_location="cpu", weights_only=True)
                if saved["env_steps"] == env_steps:
                    return saved
                why = f"{file} was saved at env_steps={saved['env_steps']}"
            except (RuntimeError, OSError, EOFError, KeyError, TypeError, ValueError, pickle.UnpicklingError) as exc:
                why = f"{file} is unreadable: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        log.warning("rank %d resumes at env_steps=%d with fresh episodes and its random numbers from its seed (%s)",
                    self.rank, env_steps, why)
        return None

    def _replay(self) -> ReplayBuffer | None:
        buffer = getattr(self.algo, "buffer", None)
        return buffer if isinstance(buffer, ReplayBuffer) else None

    def _save_replay(self, env_steps: int) -> None:
        """Write this rank's replay buffer (if the algorithm has one) to its :func:`replay_file`, marked with
        ``env_steps``."""
        buffer = self._replay()
        if buffer is None:
            return
        data = io.BytesIO()
        torch.save({"env_steps": env_steps, "buffer": buffer.state_dict()}, data)
        atomic_write_bytes(self.folder / replay_file(self.rank), data.getvalue())

    def _load_replay(self, file: Path, env_steps: int) -> None:
        """Refill the replay buffer from ``file`` when it was saved at ``env_steps``; else one warning line."""
        buffer = self._replay()
        if buffer is None:
            return
        why = f"no {file}"
        if file.is_file():
            try:
                saved = torch.load(file, map_location="cpu", weights_only=True)
                if saved["env_steps"] == env_steps:
                    buffer.load_state_dict(saved["buffer"])
                    log.info("refilled the replay buffer with %d transitions from %s", len(buffer), file)
                    return
                why = f"{file} was saved at env_steps={saved['env_steps']}"
            except (RuntimeError, OSError, EOFError, KeyError, TypeError, ValueError, pickle.UnpicklingError) as exc:
                why = f"{file} is unreadable: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        log.warning("%s resumes at env_steps=%d with an EMPTY replay buffer (%s): its first updates sample only the "
                    "transitions collected from now on", type(self.algo).__name__, env_steps, why)

    def set_aside_after(self, env_steps: int) -> None:
        """Move periodic checkpoints from beyond ``env_steps`` (an abandoned future) to ``superseded/``."""
        for steps, old in periodic_checkpoints(self.folder).items():
            if steps > env_steps:
                aside = self.folder / "superseded"
                aside.mkdir(exist_ok=True)
                os.replace(old, aside / old.name)
                log.info("moved %s (beyond the resumed env_steps=%d) to %s", old.name, env_steps, aside)
