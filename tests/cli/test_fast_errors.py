"""A config error is reported before torch is imported: the command line answers in a fraction of a second."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import atexit, sys
atexit.register(lambda: print("torch imported:", "torch" in sys.modules, file=sys.stderr))
sys.argv = ["embodirl-train", *sys.argv[1:]]
from embodirl.cli.train import main
main()
"""


@pytest.mark.parametrize(("override", "key"), [("seed=abc", "seed"), ("device=cpu:1", "device"),
                                               ("+colour=blue", "colour")])
def test_a_config_error_exits_2_without_importing_torch(tmp_path, override, key):
    done = subprocess.run([sys.executable, "-c", PROBE, override, f"hydra.run.dir={tmp_path / 'run'}"],
                          capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert lines[-1] == "torch imported: False"
    assert len(lines) == 2 and lines[0].startswith(f"embodirl-train: error: {key}=")
