"""``embodirl-export``: a trained run's checkpoint becomes a policy file and a manifest in <run>/export/<format>/;
an earlier export is never replaced silently; every bad input is one line and exit status 2."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from gymnasium.envs.classic_control import CartPoleEnv

from embodirl.cli import export as export_cli
from tests.conftest import TINY, Outcome, in_process_run

ONNX_MISSING = [name for name in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(name) is None]
needs_onnx = pytest.mark.skipif(bool(ONNX_MISSING), reason=f"the export extra is not installed (missing: "
                                f"{', '.join(ONNX_MISSING)}): pip install -e '.[export]'")



@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A tiny trained CartPole run (best.pt, last.pt and periodic checkpoints), trained once for the module."""
    from embodirl.cli import train

    path = tmp_path_factory.mktemp("export") / "run"
    argv = ["embodirl-train", *TINY, "logger.tensorboard=false", f"hydra.run.dir={path}"]
    with pytest.MonkeyPatch.context() as patch, in_process_run(timeout_s=300):
        patch.setattr(sys, "argv", argv)
        train.main()
    assert (path / "checkpoints" / "best.pt").is_file()
    return path


@pytest.fixture
def export(monkeypatch, capsys):
    """``export(args)`` runs ``embodirl-export`` in this process and returns its :class:`Outcome`."""

    def run(args: list[str]) -> Outcome:
        capsys.readouterr()
        monkeypatch.setattr(sys, "argv", ["embodirl-export", *args])
        code: int | str | None = 0
        with in_process_run(timeout_s=300):
            try:
                export_cli.main()
            except SystemExit as exc:
                code = exc.code
        out, err = capsys.readouterr()
        return Outcome(0 if code is None else code if isinstance(code, int) else 1, out, err)

    return run


def test_a_torchscript_export_lands_in_the_run_with_its_manifest(run_dir, export, tmp_path):
    out = tmp_path / "ts"
    result = export([f"run={run_dir}", "checkpoint=best", "format=torchscript", f"out={out}"])
    assert result.code == 0, result.err
    assert result.out.strip() == (f"wrote {out / 'policy.pt'} and {out / 'manifest.json'}: "
                                  "(obs.state [4] float32) -> (action [] int64)")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "torchscript" and manifest["file"] == "policy.pt"
    assert manifest["checkpoint"] == str((run_dir / "checkpoints" / "best.pt").resolve())
    assert manifest["run"] == str(run_dir.resolve()) and manifest["embodirl_version"]
    assert manifest["inputs"] == [{"name": "obs.state", "shape": [4], "dtype": "float32"}]
    assert manifest["action"] == {"name": "action", "shape": [], "dtype": "int64", "num_actions": 2,
                                  "start": 0}
    assert manifest["state"] == [] and manifest["control_dt"] == 0.02  # CartPole's Euler step
    assert manifest["history"] == [] and manifest["history_feed"] is None
    actor = torch.jit.load(str(out / "policy.pt"))
    assert actor(torch.zeros(3, 4))[0].shape == (3,)


@pytest.mark.slow  # an ONNX export loads dynamo and traces (seconds per process): the fast tier's export is TorchScript
@needs_onnx
def test_the_default_onnx_export_goes_to_run_export_onnx_and_is_never_replaced_silently(run_dir, export):
    target = run_dir / "export" / "onnx"
    assert export([f"run={run_dir}"]).code == 0  # checkpoint=last (as embodirl-eval), format=onnx
    assert sorted(p.name for p in target.iterdir()) == ["manifest.json", "policy.onnx"]
    before = (target / "policy.onnx").read_bytes()
    again = export([f"run={run_dir}", "checkpoint=best"])
    assert again.code == 2 and again.out == ""
    assert again.err.strip() == (
        f"embodirl-export: error: out='{target}' is invalid: expected a directory without an earlier export (it "
        "holds policy.onnx, manifest.json; out defaults to <run>/export/<format>). Fix: pass overwrite=true to "
        "replace it, or out=<another directory>.")
    assert (target / "policy.onnx").read_bytes() == before
    assert json.loads((target / "manifest.json").read_text())["checkpoint"].endswith("last.pt")
    assert export([f"run={run_dir}", "checkpoint=best", "overwrite=true"]).code == 0
    assert json.loads((target / "manifest.json").read_text())["checkpoint"].endswith("best.pt")


@pytest.mark.slow  # trains a second run
def test_a_push_cube_export_declares_its_bounds_and_control_period(tmp_path, export, monkeypatch):
    from embodirl.cli import train

    run = tmp_path / "push"
    monkeypatch.setattr(sys, "argv", ["embodirl-train", *TINY, "env=push_cube", "logger.tensorboard=false",
                                      f"hydra.run.dir={run}"])
    with in_process_run(timeout_s=300):
        train.main()
    assert export([f"run={run}", "checkpoint=last", "format=torchscript"]).code == 0
    manifest = json.loads((run / "export" / "torchscript" / "manifest.json").read_text())
    assert manifest["action"]["low"] == [-1.0, -1.0] and manifest["action"]["high"] == [1.0, 1.0]
    assert manifest["control_dt"] == 0.05 and manifest["env"] == "embodirl.envs.push_cube.env.PushCube"


BAD = {
    "missing run": (["run={tmp}/nowhere"], ["run='{tmp}/nowhere'", "a run directory of embodirl-train",
                                            "Fix: pass run=outputs/<date>/<time>"]),
    "run without checkpoints/": (["run={tmp}"], ["run='{tmp}'", "one that holds checkpoints/", "Fix:"]),
    "empty checkpoints/": (["run={tmp}/empty"], ["checkpoint='last'", "(found: none)",
                                                 "Fix: train the run first", "embodirl-train hydra.run.dir="]),
    "unknown format": (["run={run}", "format=tflite"], ["format='tflite'", "one of: onnx, torchscript",
                                                        "Fix: pass format=onnx"]),
    "checkpoint not found": (["run={run}", "checkpoint=step_1.pt"], ["checkpoint='step_1.pt'", "found: best.pt",
                                                                      "Fix: pass checkpoint=last"]),
    "misspelt key": (["run={run}", "formt=onnx"], ["formt", "did you mean format?", "Fix: pass format=onnx"]),
    "out is a file": (["run={run}", "out={tmp}/file"], ["out='{tmp}/file'", "a directory", "Fix:"]),
}


@pytest.mark.parametrize(("args", "parts"), BAD.values(), ids=BAD.keys())
def test_a_bad_input_is_one_line_naming_key_value_choices_and_fix(run_dir, export, tmp_path, args, parts):
    (tmp_path / "empty" / "checkpoints").mkdir(parents=True)
    (tmp_path / "file").write_text("not a directory")
    fill = {"tmp": tmp_path, "run": run_dir}
    result = export([a.format(**fill) for a in args])
    assert result.code == 2 and result.out == ""
    line = result.err.strip()
    assert "\n" not in line and line.startswith("embodirl-export: error: "), result.err
    for part in parts:
        assert part.format(**fill) in line, line


def test_onnx_without_its_packages_names_the_extra_before_loading_anything(export, monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxscript" else real(name, *a))
    result = export([f"run={tmp_path}/nowhere", "format=onnx"])  # the missing package is named, not the run
    assert result.code == 2
    assert ("format='onnx' is invalid: expected onnx with the packages onnx, onnxscript installed (missing: "
            "onnxscript), or torchscript. Fix: pip install 'embodirl[export]'") in result.err


def test_help_lists_every_key_with_its_comment(export):
    result = export(["--help"])
    assert result.code == 0 and "Usage: embodirl-export run=RUN_DIR" in result.out
    for key in ("run", "checkpoint", "format", "out", "overwrite", "trusted_targets"):
        assert f"\n  {key}=" in result.out


@pytest.mark.slow  # trains a recurrent run
@needs_onnx
def test_a_recurrent_run_exports_with_its_state_named_in_the_manifest(tmp_path, export, monkeypatch):
    import onnxruntime

    from embodirl.cli import train

    run = tmp_path / "rnn"
    monkeypatch.setattr(sys, "argv", ["embodirl-train", *TINY, "policy=actor_critic_rnn", "policy.core=lstm",
                                      "policy.core_size=16", "algo.seq_len=8", "logger.tensorboard=false",
                                      f"hydra.run.dir={run}"])
    with in_process_run(timeout_s=300):
        train.main()
    result = export([f"run={run}", "checkpoint=last"])
    assert result.code == 0, result.err
    assert result.out.strip().endswith("(obs.state [4] float32, state.actor.h [16] float32, state.actor.c [16] "
                                       "float32) -> (action [] int64, next_state.actor.h [16] float32, "
                                       "next_state.actor.c [16] float32)")
    manifest = json.loads((run / "export" / "onnx" / "manifest.json").read_text())
    assert manifest["recurrent"] and [s["name"] for s in manifest["state"]] == ["state.actor.h", "state.actor.c"]
    assert [s["initial"] for s in manifest["state"]] == ["zeros", "zeros"]  # what starts an episode
    session = onnxruntime.InferenceSession(str(run / "export" / "onnx" / "policy.onnx"))
    assert [i.name for i in session.get_inputs()] == ["obs.state", "state.actor.h", "state.actor.c"]


@pytest.mark.slow  # trains a run with an observation history
@needs_onnx
def test_a_history_run_names_its_history_and_the_guides_play_loop_feeds_it(tmp_path, export, cli):
    """The manifest lists the history; docs/guides/export.md's play.py, keeping it as the manifest says, returns what
    embodirl-eval reports for the same checkpoint and episodes."""
    import runpy

    import numpy as np

    from tests.test_docs import DOCS, python_file

    run = tmp_path / "history"
    train = ["env=gym", "env.id=CartPole-v1", "env.obs_history={state: 3}", *TINY, "logger.tensorboard=false",
             f"hydra.run.dir={run}"]
    assert cli("embodirl-train", train, timeout_s=300).code == 0
    result = export([f"run={run}"])
    assert result.code == 0, result.err
    assert result.out.strip().endswith("(obs.state [12] float32) -> (action [] int64)")
    manifest = json.loads((run / "export" / "onnx" / "manifest.json").read_text())
    assert manifest["history"] == [{"name": "obs.state", "length": 3, "step_shape": [4]}]
    assert "oldest first" in manifest["history_feed"] and "first observation" in manifest["history_feed"]
    assert cli("embodirl-eval", [f"run={run}", "env.num_envs=1", "num_episodes=3"], timeout_s=300).code == 0
    (tmp_path / "play.py").write_text(python_file(DOCS / "guides" / "export.md", "play.py"))
    page = runpy.run_path(str(tmp_path / "play.py"))
    seed = int(np.random.SeedSequence([12345, 0, 0]).generate_state(1)[0])  # embodirl-eval's, as in test_docs
    returns = page["play"](str(run / "export" / "onnx"), num_episodes=3, seed=seed)
    (evaluated,) = [json.loads(p.read_text()) for p in run.glob("eval/*/eval.json")]
    assert len(set(returns)) > 1 and evaluated["eval/return_mean"] == pytest.approx(sum(returns) / 3)
    # A tiny run's policy hardly reads its history: the page's History is checked against the env's, value for value
    from embodirl.app.build import build_env
    from tests.conftest import compose_config

    inner, wrapped = (build_env(compose_config(["env=cartpole", "env.max_episode_steps=4", *keys]).env,
                                torch.device("cpu"), 0, 1) for keys in ([], ["env.obs_history=3"]))
    history, feed = page["History"](manifest), page["feed"]
    inputs, obs = history.start(feed(manifest, inner.reset(seed=1)[0].numpy())), wrapped.reset(seed=1)
    for t in range(10):  # two episodes end (4 steps each): the page restarts its history as the env does
        assert np.array_equal(inputs["obs.state"], obs.numpy()), t
        action = torch.tensor([t % 3 % 2])
        out, obs = inner.step(action), wrapped.step(action).obs
        step = feed(manifest, out.obs[0].numpy())
        inputs = history.start(step) if bool(out.truncated | out.terminated) else history.push(step)


def test_a_checkpoint_holding_python_objects_is_refused_without_running_them(tmp_path, export):
    hostile = tmp_path / "hostile.pt"
    torch.save({"format": "embodirl-checkpoint", "x": Path("a")}, hostile)  # a GLOBAL: a class to import and call
    result = export([f"checkpoint={hostile}", "format=torchscript"])
    assert result.code == 2 and not (tmp_path / "export").exists()
    assert "holds Python objects beyond tensors and plain values, which embodirl never loads" in result.err


def test_a_failed_write_leaves_no_half_file_and_keeps_the_earlier_export(run_dir, export, tmp_path, monkeypatch):
    out = tmp_path / "keep"
    assert export([f"run={run_dir}", "format=torchscript", f"out={out}"]).code == 0
    before = (out / "policy.pt").read_bytes()

    def disk_full(actor, path):
        path.write_bytes(b"half a file")
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr("embodirl.policies.export.export_torchscript", disk_full)
    result = export([f"run={run_dir}", "format=torchscript", f"out={out}", "overwrite=true"])
    assert result.code == 1 and "No space left on device (errno 28)" in result.err
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "policy.pt"]
    assert (out / "policy.pt").read_bytes() == before


class _ShiftedActions(gym.ActionWrapper):
    """CartPole whose two actions are -1 and 0 (``Discrete(2, start=-1)``)."""

    def __init__(self, **kwargs):
        super().__init__(CartPoleEnv(**kwargs))
        self.action_space = gym.spaces.Discrete(2, start=-1)

    def action(self, action):
        assert action in (-1, 0), action
        return int(action) + 1


def test_a_discrete_space_with_a_start_exports_the_envs_own_actions(tmp_path, export, monkeypatch):
    """The adapters act with 0 .. n-1 and add the start; the export outputs the env's own action and the manifest
    names the range, so a driver needs no offset of its own."""
    from embodirl.cli import train

    if "EmbodirlTest/ShiftedCartPole-v0" not in gym.registry:
        gym.register("EmbodirlTest/ShiftedCartPole-v0", entry_point=_ShiftedActions, max_episode_steps=50)
    run = tmp_path / "shifted"
    monkeypatch.setattr(sys, "argv", ["embodirl-train", *TINY, "env=gym", "env.id=EmbodirlTest/ShiftedCartPole-v0",
                                      "logger.tensorboard=false", f"hydra.run.dir={run}"])
    with in_process_run(timeout_s=300):
        train.main()
    assert export([f"run={run}", "checkpoint=last", "format=torchscript"]).code == 0
    out = run / "export" / "torchscript"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["action"] == {"name": "action", "shape": [], "dtype": "int64", "num_actions": 2, "start": -1}
    actor, obs = torch.jit.load(str(out / "policy.pt")), torch.randn(256, 4)
    index = actor.policy.actor(obs).argmax(-1)  # the Categorical's mode, 0 .. n-1
    assert torch.equal(actor(obs)[0], index - 1)


def test_export_and_eval_take_the_same_checkpoint_by_default():
    # last.pt: written by every run (best.pt only from its first evaluation), what the training summary reports
    # and a resume continues; best.pt is one override away.
    from embodirl.config.run import EvaluateConfig, ExportConfig
    from tests.conftest import compose_config

    assert compose_config([], "export").checkpoint == compose_config([], "eval").checkpoint == "last"
    assert ExportConfig().checkpoint == EvaluateConfig().checkpoint == "last"


def test_an_empty_out_is_refused_and_nothing_lands_in_the_current_directory(run_dir, export, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # out= (empty) wrote policy.pt and manifest.json wherever one stood
    result = export([f"run={run_dir}", "format=torchscript", "out="])
    assert result.code == 2
    line = result.err.strip()
    assert "\n" not in line and "out='' is invalid" in line and "Fix: pass out=<a directory>" in line
    assert list(tmp_path.iterdir()) == []


def test_the_manifest_says_the_chunk_and_how_much_of_it_to_execute(tmp_path):
    from embodirl.app.build import build_env, build_policy
    from embodirl.policies.export import DeterministicActor
    from tests.conftest import compose_config

    cfg = compose_config(["device=cpu", "env=push_cube", "policy.action_chunk=4", "policy.chunk_execute=2"])
    env = build_env(cfg.env, torch.device("cpu"), 0, num_envs=1)
    actor = DeterministicActor(build_policy(cfg.policy, env, torch.device("cpu")).eval(), env.observation_space,
                               env.action_space)
    record = export_cli.manifest(actor, fmt="torchscript", file="policy.pt", checkpoint=tmp_path / "last.pt",
                                 run=None, env=env, train_cfg=cfg)
    assert (record["action_chunk"], record["chunk_execute"]) == (4, 2)
    assert record["action"]["shape"] == [4, 2] and record["action"]["low"] == [-1.0, -1.0]
