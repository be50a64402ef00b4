"""A callback for the tests: appends every hook call as one JSON line to ``path`` (works across processes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from embodirl.training.callbacks import Callback


class RecordingCallback(Callback):
    """Records ``(hook, a few fields)`` per call.

    Args:
        path: JSON-lines file the calls are appended to.
        tag: Written into every line (tells two instances apart).
    """

    def __init__(self, path: str, tag: str = "") -> None:
        self.path = Path(path)
        self.tag = tag

    def _write(self, **fields: Any) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"tag": self.tag, **fields}) + "\n")

    def on_iteration(self, record: dict[str, Any]) -> None:
        self._write(hook="on_iteration", env_steps=record["env_steps"])

    def on_evaluation(self, record: dict[str, Any]) -> None:
        self._write(hook="on_evaluation", env_steps=record["env_steps"], eval_return=record["eval/return_mean"])

    def on_checkpoint(self, path: Path, record: dict[str, Any]) -> None:
        self._write(hook="on_checkpoint", file=Path(path).name, exists=Path(path).is_file(),
                    env_steps=record["env_steps"])

    def on_end(self, summary: dict[str, Any]) -> None:
        self._write(hook="on_end", status=summary["status"], env_steps=summary["env_steps"])


class OnlyEnd:
    """A duck-typed callback (no base class) with a single hook."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def on_end(self, summary: dict[str, Any]) -> None:
        self.path.write_text(summary["status"])
