"""A callback for the launcher tests: kills its own process with SIGKILL at the first iteration of one seed."""

from __future__ import annotations

import os
import signal
from typing import Any

from embodirl.training.callbacks import Callback


class KillSeed(Callback):
    """Kills the process (no Python cleanup, as kill -9 or the OOM killer would) when ``seed == kill_seed``."""

    def __init__(self, seed: int, kill_seed: int) -> None:
        self.doomed = seed == kill_seed

    def on_iteration(self, record: dict[str, Any]) -> None:
        if self.doomed:
            os.kill(os.getpid(), signal.SIGKILL)
