"""The fake SLURM commands (``fake_slurm/``) as a fixture for the launcher tests."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest

FAKE_SLURM = Path(__file__).resolve().parent / "fake_slurm"


@pytest.fixture
def fake_slurm_path(tmp_path, monkeypatch):
    """The fake SLURM commands first on PATH, their state in ``tmp_path/slurm``, a random first job id."""
    bin_dir, state = tmp_path / "bin", tmp_path / "slurm"
    shutil.copytree(FAKE_SLURM, bin_dir, ignore=shutil.ignore_patterns("__pycache__"))
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    state.mkdir()
    # submitit derives MASTER_PORT from the job id: a random id keeps concurrent test sessions apart
    (state / "next_id").write_text(str(random.randrange(10_000, 900_000)))
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_SLURM_DIR": str(state)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield env

    def unfinished() -> list[str]:
        return [r.stem for r in (state / "jobs").glob("*.json")
                if json.loads(r.read_text())["State"] in ("PENDING", "RUNNING")]

    deadline = time.monotonic() + 5  # a finished job's batch script may still be exiting
    while unfinished() and time.monotonic() < deadline:
        time.sleep(0.1)
    for job in unfinished():  # leave nothing running behind a failed test
        subprocess.run([str(bin_dir / "scancel"), job], check=False)
