"""What a command imports before it answers: --help and a refused config never import torch (nor numpy, rich,
tensordict or the loggers), and a run reaches its training clock without what it does not use (rich, dynamo,
optional extras)."""

from __future__ import annotations

import subprocess
import sys

import pytest

ANSWERS = """
import sys
from embodirl.cli.train import main
codes, run_dir = [], sys.argv[1]
for argv in (["--help"], ["algo=nope"], ["algo.learning_rate=abc"], ["algo.learning_rat=1e-3"]):
    sys.argv = ["embodirl-train", *argv, "hydra.run.dir=" + run_dir]
    try:
        main()
        codes.append(0)
    except SystemExit as exc:
        codes.append(exc.code)
heavy = sorted(m for m in ("torch", "numpy", "tensordict", "rich", "gymnasium", "embodirl.training.loggers")
               if m in sys.modules)
print("codes:", codes, "imported:", heavy, file=sys.stderr)
"""

UNKNOWN_OPTION = """
import sys
from embodirl.cli.train import main
sys.argv = ["embodirl-train", "algo=nope", "hydra.run.dir=" + sys.argv[1]]
try:
    main()
except SystemExit as exc:
    print("code:", exc.code, "schemas imported:", "embodirl.config.components" in sys.modules, file=sys.stderr)
"""

AT_THE_CLOCK = """
import sys
import embodirl.cli  # the console scripts' start: dynamo deferred before torch is imported
from embodirl.cli.train import main
from embodirl.training.trainer import Trainer

def train(self):
    unused = ("rich", "torch._dynamo", "torch._inductor", "wandb", "submitit", "onnx", "onnxruntime", "mujoco",
              "matplotlib", "embodirl.analysis.summary")
    print("imported at the clock:", sorted(m for m in unused if m in sys.modules), file=sys.stderr)
    raise SystemExit(0)

Trainer.train = train
sys.argv = ["embodirl-train", "hydra.run.dir=" + sys.argv[1]]
main()
"""


@pytest.mark.slow  # a fresh process
def test_help_and_refused_configs_import_no_torch(tmp_path):
    done = subprocess.run([sys.executable, "-c", ANSWERS, str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=120)
    assert done.stderr.strip().splitlines()[-1] == "codes: [0, 2, 2, 2] imported: []", done.stderr


@pytest.mark.slow  # a fresh process
def test_an_unknown_option_is_answered_without_the_schemas(tmp_path):
    # Its line names the options of the group's folder: the components' schemas (~0.1 s to import) play no part.
    done = subprocess.run([sys.executable, "-c", UNKNOWN_OPTION, str(tmp_path / "run")], capture_output=True,
                          text=True, timeout=120)
    assert done.stderr.strip().splitlines()[-1] == "code: 2 schemas imported: False", done.stderr
    assert done.stderr.startswith("embodirl-train: error: algo=nope is invalid: expected one of: ")


@pytest.mark.slow  # a fresh process that imports torch and builds the default run
def test_the_default_run_reaches_its_clock_without_what_it_does_not_use(tmp_path):
    done = subprocess.run([sys.executable, "-c", AT_THE_CLOCK, str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "imported at the clock: []", done.stderr
