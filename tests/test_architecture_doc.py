"""The architecture page's walk-throughs work as written: their files, copied out of the page into an empty
project, pass their own tests, and every command the page shows for them runs.

A walk-through's files are the page's fenced blocks with a title (```` ```python title="my_rl/ppo_kl.py" ````);
its commands are the ``embodirl-train`` lines of its ``bash`` blocks, run as the project's user would
(``PYTHONPATH=.`` from the project's root), in a smoke version (``trainer=debug``).
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import re
import shlex
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import in_process_run
from tests.test_docs import run_script, shell_commands

PAGE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
TITLED_BLOCK = re.compile(r'^```(\w+) title="([^"]+)"\n(.*?)^```$', re.MULTILINE | re.DOTALL)
WALKTHROUGHS = {  # the page's promise: one module, one YAML file and one test each
    "algorithm": ("my_rl/ppo_kl.py", "conf/algo/ppo_kl.yaml", "tests/test_ppo_kl.py"),
    "off-policy algorithm": ("my_rl/ddpg.py", "conf/algo/ddpg.yaml", "tests/test_ddpg.py"),
    "env": ("my_rl/point_reach.py", "conf/env/point_reach.yaml", "tests/test_point_reach.py"),
    "policy": ("my_rl/shared_trunk.py", "conf/policy/shared_trunk.yaml", "tests/test_shared_trunk.py"),
    "encoder": ("my_rl/fourier.py", "conf/policy/encoder/fourier.yaml", "tests/test_fourier.py"),
}


def page_files(text: str) -> dict[str, str]:
    """The titled code blocks of a page: file path -> contents."""
    return {m.group(2): m.group(3) for m in TITLED_BLOCK.finditer(text)}


@pytest.fixture
def project(tmp_path, monkeypatch):
    """An empty project holding every file of the page, importable and the working directory, as the page says."""
    root = tmp_path / "my_project"
    for path, code in page_files(PAGE.read_text()).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(code)
    (root / "my_rl" / "__init__.py").touch()
    monkeypatch.chdir(root)
    monkeypatch.syspath_prepend(str(root))  # PYTHONPATH=.
    yield root
    for name in [m for m in sys.modules if m == "my_rl" or m.startswith(("my_rl.", "doc_test_"))]:
        del sys.modules[name]


def run_doc_tests(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Call every ``test_*`` function of a test file of the page (``tmp_path`` and ``monkeypatch`` given to those
    that take them); return their names."""
    spec = importlib.util.spec_from_file_location(f"doc_test_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    names = [name for name in vars(module) if name.startswith("test_")]
    for i, name in enumerate(names):
        func = getattr(module, name)
        fixtures = {"tmp_path": tmp_path / f"{name}_{i}", "monkeypatch": monkeypatch}
        fixtures["tmp_path"].mkdir()
        with in_process_run(timeout_s=300):
            func(**{arg: fixtures[arg] for arg in inspect.signature(func).parameters})
    return names


def test_each_walkthrough_is_one_module_one_yaml_file_and_one_test():
    files = page_files(PAGE.read_text())
    assert set(files) == {path for paths in WALKTHROUGHS.values() for path in paths}
    for module, option, test in WALKTHROUGHS.values():
        target = re.search(r"^\s*_target_: (\S+)$", files[option], re.MULTILINE)  # ddpg.yaml's is under algo:
        assert target, f"{option} names no _target_"
        assert target.group(1).startswith(module.removesuffix(".py").replace("/", ".") + ".")
        assert "def test_" in files[test]


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(WALKTHROUGHS))
def test_the_walkthroughs_own_tests_pass(kind, project, tmp_path, monkeypatch):
    names = run_doc_tests(project / WALKTHROUGHS[kind][2], tmp_path, monkeypatch)
    assert names, f"{WALKTHROUGHS[kind][2]} holds no test"


def test_the_new_algorithm_logs_its_own_loss_terms(project, tmp_path, monkeypatch):
    from my_rl.ppo_kl import KLPenaltyPPO

    run = tmp_path / "run"
    argv = ["embodirl-train", "--config-dir", "conf", "algo=ppo_kl", "trainer=debug", "device=cpu",
            "logger.console=none", f"hydra.run.dir={run}"]
    assert run_script(argv, monkeypatch) == 0
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert set(KLPenaltyPPO.metric_names) <= set(last) and "loss/kl" in KLPenaltyPPO.metric_names


@pytest.mark.slow  # a walk-through's training run; the on-policy one above stays in the fast tier
def test_the_new_off_policy_algorithm_takes_gradient_steps_and_logs_its_terms(project, tmp_path, monkeypatch):
    from my_rl.ddpg import DDPG

    run = tmp_path / "run"
    argv = ["embodirl-train", "--config-dir", "conf", "algo=ddpg", "env=gym", "env.id=Pendulum-v1",
            "env.num_envs=4", "algo.learning_starts=64", "algo.minibatch_size=32", "policy.hidden_sizes=[16]",
            "algo.critic_hidden_sizes=[16]", "trainer.total_env_steps=256", "eval.every_env_steps=256",
            "eval.num_envs=1", "device=cpu", "logger.console=none", f"hydra.run.dir={run}"]
    assert run_script(argv, monkeypatch) == 0
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert set(DDPG.metric_names) <= set(last) and last["diag/num_updates"] == 7 * 8
    # 8 iterations of 4 envs x 8 steps, gradient steps in the 7 from learning_starts on, 8 x updates_per_step each
    saved = torch.load(run / "checkpoints" / "last.pt", weights_only=True)["algo"]
    assert {"critic", "target_critic", "target_actor", "actor_optimizer", "critic_optimizer"} <= set(saved)
    assert (run / "checkpoints" / "replay.pt").is_file()


HELP_SHOWS = {"ppo_kl": "kl_coef", "ddpg": "critic_hidden_sizes"}  # a key of each new algorithm's own schema


def page_commands() -> list[list[str]]:
    """The page's ``embodirl-*`` command lines (the ``PYTHONPATH=.`` prefix dropped: the fixture provides it)."""
    commands = [argv[1:] if argv[0] == "PYTHONPATH=." else argv for argv in shell_commands(PAGE)]
    return [argv for argv in commands if argv[0].startswith("embodirl-")]


def test_the_page_shows_a_command_for_each_walkthrough():
    lines = [" ".join(argv) for argv in page_commands()]
    for kind, (_, option, _) in WALKTHROUGHS.items():
        name = Path(option).stem
        assert any(f"={name}" in line and "--config-dir conf" in line for line in lines), kind


@pytest.mark.slow
@pytest.mark.parametrize("argv", page_commands(), ids=shlex.join)
def test_every_command_of_the_page_runs(argv, project, tmp_path, monkeypatch, capsys):
    # the budget of one PPO iteration: an off-policy algorithm takes gradient steps from its learning_starts on
    smoke = argv if "--help" in argv else [*argv, "trainer=debug", "trainer.total_env_steps=2048", "device=cpu",
                                           "logger.console=none", f"hydra.run.dir={tmp_path / 'run'}"]
    status = run_script(smoke, monkeypatch)
    out, err = capsys.readouterr()
    assert status == 0, f"{shlex.join(argv)} exited {status}: {err[-2000:]}"
    if "--help" in argv:
        algo = next(a.split("=", 1)[1] for a in argv if a.startswith("algo="))
        assert HELP_SHOWS[algo] in out  # the new algorithm's keys, documented from its schema
    else:
        assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"

