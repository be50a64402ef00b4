"""A component of one's own (issue 32 items 7 and 10): its schema is checked before torch when its package names the
torch-free schema module in the ``embodirl.schemas`` entry points, ``--help`` shows the schema's docstring, a module
that fails to import is one line naming it and the error, and its own keys are never renamed by embodirl's table of
renamed keys (``algo.batch_size``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY

SCHEMAS = '''
"""my_lab's schemas: torch-free, named in the embodirl.schemas entry points."""
from dataclasses import dataclass

from embodirl.config.algos import PPOConfig
from embodirl.config.schema import key


@dataclass(frozen=True, kw_only=True)
class BatchPPOConfig(PPOConfig):
    """PPO with a batch size of its own.

    (Only the first paragraph is shown by --help.)"""

    target = "my_lab.algo.BatchPPO"
    batch_size: int = key(64, ge=1, doc="a key of this algorithm's own (embodirl's algo.batch_size is a renamed key)")
'''

ALGO = '''
import torch  # noqa: F401  (an algorithm module imports torch: the check must not need it)

from embodirl.algos.ppo import PPO
from my_lab.schemas import BatchPPOConfig


class BatchPPO(PPO):
    cfg: BatchPPOConfig
'''


def _lab(root: Path, entry_point: str | None = "my_lab.schemas") -> Path:
    """``root/my_lab`` (a schema module and an algorithm module) and, with ``entry_point``, the dist-info of an
    installed package that names it in ``embodirl.schemas`` (what ``pip install -e .`` writes)."""
    (root / "my_lab").mkdir(parents=True)
    (root / "my_lab" / "__init__.py").touch()
    (root / "my_lab" / "schemas.py").write_text(SCHEMAS)
    (root / "my_lab" / "algo.py").write_text(ALGO)
    if entry_point is not None:
        info = root / "my_lab-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my_lab\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[embodirl.schemas]\nmy_lab = {entry_point}\n")
    return root


PROBE = '''
import contextlib, io, json, sys
from embodirl.cli.train import main

def run(args):
    sys.argv = ["embodirl-train", *args]
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code
    return {"code": code, "err": err.getvalue(), "out": out.getvalue(), "torch": "torch" in sys.modules,
            "algo_module": "my_lab.algo" in sys.modules}

print(json.dumps([run(args) for args in json.loads(sys.argv[1])]))
'''


def _probe(root: Path, runs: list[list[str]]) -> list[dict]:
    """embodirl-train's main for each argument list, in one fresh process with ``root`` on the path."""
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(repo)])}
    result = subprocess.run([sys.executable, "-c", PROBE, json.dumps(runs)], capture_output=True, text=True,
                            env=env, cwd=root, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.slow  # a fresh process
def test_an_own_schema_is_checked_before_torch_and_help_shows_its_docstring(tmp_path):
    """Was: the schema was found by importing my_lab.algo, and torch with it (21.8 s at load 8)."""
    lab = _lab(tmp_path)
    target = ["algo._target_=my_lab.algo.BatchPPO", f"hydra.run.dir={tmp_path / 'run'}"]
    bad, page = _probe(lab, [[*target, "+algo.batch_size=0"], [*target, "+algo.batch_size=3", "--help"]])
    assert bad["code"] == 2 and bad["err"].count("\n") == 1, bad["err"]
    assert "algo.batch_size=0 is invalid: expected an int >= 1" in bad["err"]
    assert not bad["torch"] and not bad["algo_module"]  # checked by the schema module alone
    assert page["code"] == 0, page["err"]
    assert "algo=ppo (my_lab.algo.BatchPPO): PPO with a batch size of its own.\n" in page["out"]
    assert "algo.batch_size=3" in page["out"] and "# a key of this algorithm's own" in page["out"]


@pytest.mark.slow  # fresh processes
def test_a_module_that_fails_to_import_is_one_line_naming_it_and_the_error(tmp_path):
    """Was: an internal error (or "an importable class" without the reason, after Hydra's three-line log)."""
    lab = _lab(tmp_path, entry_point="my_lab.broken_schemas")
    (lab / "my_lab" / "broken_schemas.py").write_text("import no_such_dependency\n")
    (lab / "my_lab" / "broken_algo.py").write_text("import no_such_dependency\nclass Algo: ...\n")
    by_entry_point, = _probe(lab, [["hydra.run.dir=run"]])
    line = by_entry_point["err"].strip()
    assert by_entry_point["code"] == 2 and len(line.splitlines()) == 1, by_entry_point["err"]
    assert "entry point embodirl.schemas:my_lab='my_lab.broken_schemas' is invalid" in line
    assert "ModuleNotFoundError: No module named 'no_such_dependency'" in line
    assert "Fix: fix that import in my_lab.broken_schemas, or remove the entry point from my_lab's" in line
    (lab / "my_lab-0.1.dist-info" / "entry_points.txt").write_text("[embodirl.schemas]\nmy_lab = my_lab.schemas\n")
    by_target, = _probe(lab, [[*TINY, "algo._target_=my_lab.broken_algo.Algo", "hydra.run.dir=run"]])
    line = by_target["err"].strip()
    assert by_target["code"] == 2 and len(line.splitlines()) == 1, by_target["err"]
    assert "algo._target_='my_lab.broken_algo.Algo' is invalid: expected a class whose module imports; importing " \
           "my_lab.broken_algo failed with ModuleNotFoundError: No module named 'no_such_dependency'" in line


@pytest.mark.slow
def test_an_own_algorithm_with_a_batch_size_key_trains_and_resumes(cli, tmp_path, monkeypatch):
    """Was: refused on resume ("algo.minibatch_size 32 -> 64"): the stored algo.batch_size read as the renamed key."""
    monkeypatch.syspath_prepend(str(_lab(tmp_path / "lab", entry_point=None)))
    args = [*TINY, "algo._target_=my_lab.algo.BatchPPO", "+algo.batch_size=32", f"hydra.run.dir={tmp_path / 'run'}"]
    try:
        assert (first := cli("embodirl-train", args)).code == 0, first.err
        resumed = cli("embodirl-train", [*args, "trainer.total_env_steps=384"])
        assert resumed.code == 0, resumed.err
        steps = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])["env_steps"]
        assert steps == 384 and "batch_size: 32" in (tmp_path / "run" / ".hydra" / "config.yaml").read_text()
    finally:
        for name in [m for m in sys.modules if m == "my_lab" or m.startswith("my_lab.")]:
            del sys.modules[name]


def test_a_stored_key_the_new_config_still_has_is_not_renamed():
    from embodirl.app.resume import config_changes

    own = {"algo": {"_target_": "my_lab.algo.BatchPPO", "batch_size": 32, "minibatch_size": 64}}
    assert config_changes(own, own) == []
    old_name = {"algo": {"_target_": "embodirl.algos.ppo.PPO", "batch_size": 32}}  # a run of embodirl 0.1
    assert config_changes(old_name, {"algo": {"_target_": "embodirl.algos.ppo.PPO", "minibatch_size": 32}}) == []
