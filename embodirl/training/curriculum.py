"""Curricula: ``trainer.curriculum`` moves ``env.randomize`` ranges through levels while training runs.

Each entry names a randomized parameter and its range at each level. It goes one level up on a schedule
(``every_env_steps``: level ``env_steps // every_env_steps``) or each time a logged metric reaches a threshold
(Isaac Lab's terrain levels: ``eval/success_rate >= 0.8`` -> harder). The Trainer calls :meth:`Curriculum.update`
once per iteration with the iteration's record; a change is applied to the training env (its ranges are tensors
updated in place, so a compiled step needs no recompile), logged as one line, and every record carries
``curriculum/<name>`` (the level). The levels are trainer state: they go into the checkpoint and a resumed run
continues from them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from embodirl.config.training import CurriculumConfig
from embodirl.envs.base import BatchedEnv
from embodirl.envs.randomization import DAMAGED_CHECKPOINT_FIX
from embodirl.errors import CheckpointError, ConfigError, is_int

__all__ = ["Curriculum"]

log = logging.getLogger(__name__)


class Curriculum:
    """The ``trainer.curriculum`` entries acting on one env.

    Args:
        entries: Name -> entry (``trainer.curriculum``).
        env: The training env; every entry's ``param`` must be in its ``env.randomize``.

    Raises:
        ConfigError: An entry names a parameter the env does not randomize, or a level its range refuses.
    """

    def __init__(self, entries: Mapping[str, CurriculumConfig], env: BatchedEnv) -> None:
        self.entries, self.env = dict(entries), env
        self.levels = dict.fromkeys(self.entries, 0)
        names = env.randomization.params if env.randomization is not None else ()
        for name, entry in self.entries.items():
            if entry.param not in names:
                raise ConfigError(f"trainer.curriculum.{name}.param", entry.param,
                                  f"a parameter in env.randomize (randomized here: {', '.join(names) or 'none'})",
                                  f"add +env.randomize.{entry.param}.range=[1,1] (level 0 replaces it), or name "
                                  "a randomized parameter",
                                  absolute=True)
            for i, (low, high) in enumerate(entry.levels):  # refused now, not when the level is reached
                try:
                    env.set_randomize_range(entry.param, low, high)
                except ConfigError as exc:
                    raise ConfigError(f"trainer.curriculum.{name}.levels[{i}]", [low, high], exc.expected,
                                      exc.fix, absolute=True) from None

    def start(self, levels: Mapping[str, int]) -> None:
        """Apply ``levels`` (a checkpoint's, or none: level 0 everywhere) before the first reset of the run; a
        level beyond an entry's last (its levels were shortened) is the last.

        Raises:
            CheckpointError: ``levels`` is no mapping, or holds a level that is no count >= 0 (a damaged file).
        """
        fix = DAMAGED_CHECKPOINT_FIX
        if not isinstance(levels, Mapping):
            raise CheckpointError(f"the checkpoint's trainer.curriculum state is {type(levels).__name__}: expected a "
                                  f"mapping of entry names to levels. {fix}")
        for name, entry in self.entries.items():
            level = levels.get(name, 0)
            if not is_int(level) or level < 0:
                raise CheckpointError(f"the checkpoint's curriculum level of trainer.curriculum.{name} is "
                                      f"{str(level)[:40]!r}: expected a level 0..{len(entry.levels) - 1}. {fix}")
            self.levels[name] = min(level, len(entry.levels) - 1)
            self._apply(name)

    def update(self, env_steps: int, record: Mapping[str, Any]) -> dict[str, float]:
        """Move the entries whose schedule or threshold says so; ``{"curriculum/<name>": level}`` of every entry."""
        for name, entry in self.entries.items():
            level = self.levels[name]
            if entry.every_env_steps is not None:
                level = env_steps // entry.every_env_steps
            elif entry.metric is not None and entry.threshold is not None:
                value = record.get(entry.metric)
                level += int(isinstance(value, int | float) and value >= entry.threshold)
            level = min(level, len(entry.levels) - 1)
            if level != self.levels[name]:
                self.levels[name] = level
                self._apply(name)
                low, high = entry.levels[level]
                log.info("curriculum %s: level %d of %d at env_steps=%d: %s in [%g, %g]", name, level,
                         len(entry.levels) - 1, env_steps, entry.param, low, high)
        return {f"curriculum/{name}": float(level) for name, level in self.levels.items()}

    def _apply(self, name: str) -> None:
        entry = self.entries[name]
        self.env.set_randomize_range(entry.param, *entry.levels[self.levels[name]])
