"""A config error is reported before torch is imported: the command line answers in a fraction of a second."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import atexit, sys
atexit.register(lambda: print("torch imported:", "torch" in sys.modules, file=sys.stderr))
prog = sys.argv[1]
sys.argv = [prog, *sys.argv[2:]]
from embodirl.cli.train import main as train
from embodirl.cli.evaluate import main as evaluate
from embodirl.cli.export import main as export
{"embodirl-train": train, "embodirl-eval": evaluate, "embodirl-export": export}[prog]()
"""


SLOW = pytest.mark.slow  # a fresh Python per case: one case per command stays in the fast tier


@pytest.mark.parametrize(("prog", "override", "key"), [
    ("embodirl-train", "seed=abc", "seed"), pytest.param("embodirl-train", "device=cpu:1", "device", marks=SLOW),
    pytest.param("embodirl-train", "+colour=blue", "colour", marks=SLOW),
    pytest.param("embodirl-train", "algo.optimizer.eps=-1", "algo.optimizer.eps", marks=SLOW),
    ("embodirl-eval", "num_episodes=0", "num_episodes"),
    pytest.param("embodirl-eval", "device=gpu", "device", marks=SLOW),
    ("embodirl-export", "format=tflite", "format")])
def test_a_config_error_exits_2_without_importing_torch(tmp_path, prog, override, key):
    done = subprocess.run([sys.executable, "-c", PROBE, prog, override, f"hydra.run.dir={tmp_path / 'run'}"],
                          capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert lines[-1] == "torch imported: False"
    assert len(lines) == 2 and lines[0].startswith(f"{prog}: error: {key}=")
