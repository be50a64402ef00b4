"""``embodirl-eval export=DIR [env=NAME]``: the exported file itself, run beside its checkpoint and in a second env,
reported side by side; a layout that does not match and a corrupt or hostile export are one line and exit 2."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from embodirl.app.run import run_training
from tests.conftest import TINY, compose_config

needs_onnx = pytest.mark.skipif(any(importlib.util.find_spec(n) is None for n in ("onnx", "onnxscript", "onnxruntime")),
                                reason="the export extra is not installed: pip install -e '.[export]'")
# An ONNX export traces through torch.export, which loads dynamo (seconds per process): the ONNX cases run in the
# slow tier, the fast tier evaluates the TorchScript export.
FORMATS = ["torchscript", pytest.param("onnx", marks=[needs_onnx, pytest.mark.slow])]
EVAL = ["num_episodes=4", "env.num_envs=4", "device=cpu"]  # push_cube episodes run to their limit: 4 do


def _export(run: Path, fmt: str) -> Path:
    from embodirl.cli.export import export_checkpoint

    out = run.parent / fmt
    export_checkpoint(compose_config([f"run={run}", f"format={fmt}", f"out={out}"], "export"))
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    """A tiny push_cube run (actions clipped to a Box, a normaliser inside) and its TorchScript export."""
    root = tmp_path_factory.mktemp("sim2sim")
    run_training(compose_config([*TINY, "env=push_cube"]), root / "run")
    return {"run": root / "run", "torchscript": _export(root / "run", "torchscript")}


@pytest.fixture(scope="module")
def exported_onnx(exported) -> dict[str, Path]:
    """:func:`exported` with the run's ONNX export too."""
    return {**exported, "onnx": _export(exported["run"], "onnx")}


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_export_in_the_training_env_repeats_the_checkpoints_episodes(cli, tmp_path, request, fmt):
    exported = request.getfixturevalue("exported_onnx" if fmt == "onnx" else "exported")
    result = cli("embodirl-eval", [f"export={exported[fmt]}", *EVAL, f"hydra.run.dir={tmp_path}"])
    assert result.code == 0, result.err
    record = json.loads((tmp_path / "eval.json").read_text())
    checkpoint, export = record["rows"]
    assert (checkpoint["policy"], export["policy"]) == ("checkpoint", f"export ({fmt})")
    assert checkpoint["env"] == export["env"] == "PushCube (training)"
    assert checkpoint["eval/num_episodes"] == export["eval/num_episodes"] == 4
    # One seed, the same starts: the same episodes, up to float rounding inside the exported file.
    assert export["eval/success_rate"] == checkpoint["eval/success_rate"]
    assert export["eval/return_mean"] == pytest.approx(checkpoint["eval/return_mean"], rel=1e-5)
    assert export["eval/length_mean"] == checkpoint["eval/length_mean"]
    assert record["checkpoint"] == str((exported["run"] / "checkpoints" / "last.pt").resolve())
    assert record["mismatches"] == [] and not any(c["mismatch"] for c in record["comparisons"])


def test_a_gap_beyond_noise_fails_the_check_with_one_line_and_exit_1(cli, tmp_path, exported, monkeypatch):
    import embodirl.cli.evaluate as evaluate
    from embodirl.app.exported import ExportedPolicy

    real = evaluate._episodes

    def export_returns_less(env, policy, cfg):  # a broken export: every episode 100 less than its checkpoint's
        metrics = real(env, policy, cfg)
        if isinstance(policy, ExportedPolicy):
            metrics["eval/return_mean"] -= 100.0
        return metrics

    monkeypatch.setattr(evaluate, "_episodes", export_returns_less)
    result = cli("embodirl-eval", [f"export={exported['torchscript']}", *EVAL, f"hydra.run.dir={tmp_path}"])
    assert result.code == 1 and len(result.err.strip().splitlines()) == 1, result.err
    assert result.err.startswith("embodirl-eval: sim-to-sim check failed: export vs checkpoint in the training env: "
                                 "eval/return_mean ")
    assert "differs by -100 (95 % interval [" in result.err and "excludes zero)" in result.err
    assert "Fix: export it again from the run (embodirl-export run=<run dir> out=<a new directory>)" in result.err
    record = json.loads((tmp_path / "eval.json").read_text())  # written before the exit, with the table printed
    assert len(record["mismatches"]) == 1 and "MISMATCH" in result.out


@pytest.mark.slow  # three evaluations
def test_a_second_env_gets_a_third_row_and_the_report_says_which_interval(cli, tmp_path, exported):
    # No env.num_envs: the second env's option file is read with eval.yaml's null count, which the run's
    # eval.num_envs replaces (the parse refused the null before the count was set).
    result = cli("embodirl-eval", [f"export={exported['torchscript']}", "num_episodes=8", "device=cpu", "env=push_cube",
                                   "env.substeps=10", f"hydra.run.dir={tmp_path}"])
    assert result.code == 0, result.err
    rows = json.loads((tmp_path / "eval.json").read_text())["rows"]
    assert [(r["policy"], r["env"]) for r in rows] == [("checkpoint", "PushCube (training)"),
                                                       ("export (torchscript)", "PushCube (training)"),
                                                       ("export (torchscript)", "push_cube env.substeps=10")]
    lines = result.out.splitlines()
    assert any([c.strip() for c in line.split("│")[1:3]] == ["export (torchscript)", "push_cube env.substeps=10"]
               for line in lines)
    assert "success rate [95 % Wilson]" in result.out
    second = "export in push_cube env.substeps=10 vs in the training env: eval/"
    assert sum(line.startswith(second) for line in lines) == 2
    assert sum(line.startswith("export vs checkpoint in the training env: eval/") for line in lines) == 2


def test_a_layout_that_does_not_match_is_one_line_before_any_episode(cli, tmp_path, exported):
    result = cli("embodirl-eval", [f"export={exported['torchscript']}", *EVAL, "env=push_cube_arm",
                                   f"hydra.run.dir={tmp_path / 'eval'}"])
    assert result.code == 2 and result.out == ""
    assert result.err.strip() == (
        "embodirl-eval: error: env='push_cube_arm' is invalid: expected an env with the export's observations and "
        "action (the manifest's: obs.state [17] float32 -> action [2] float32; this env's: obs.state [32] float32 "
        "-> action [6] float32). Fix: pass env=<an env with this layout> (docs/guides/export.md, sim-to-sim), or "
        "train and export a policy on this env.")
    assert not (tmp_path / "eval").exists()  # nothing evaluated, nothing kept


def _edit_manifest(directory: Path, change) -> Path:
    manifest = json.loads((directory / "manifest.json").read_text())
    change(manifest)
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def _write(directory: Path, name: str, text: str) -> Path:
    (directory / name).write_text(text)
    return directory


BAD_EXPORTS = {
    "truncated TorchScript": (lambda d: _write(d, "policy.pt", "not a zip"),
                              "policy.pt is not a TorchScript file torch.jit.load reads"),
    "manifest not JSON": (lambda d: _write(d, "manifest.json", "{"), "manifest.json is not JSON"),
    "manifest a list": (lambda d: _write(d, "manifest.json", "[1]"), "is not a manifest of embodirl-export"),
    "file outside the directory": (lambda d: _edit_manifest(d, lambda m: m.update(file="../../etc/passwd")),
                                   "file='../../etc/passwd' is not what embodirl-export writes"),
    "shape not a list": (lambda d: _edit_manifest(d, lambda m: m["inputs"][0].update(shape="17")),
                         "inputs[0] is not a tensor entry of embodirl-export"),
    "unknown dtype": (lambda d: _edit_manifest(d, lambda m: m["action"].update(dtype="object")),
                      "action is not a tensor entry of embodirl-export"),
    "initial state not numbers": (lambda d: _edit_manifest(d, lambda m: m.update(state=[
        {"name": "state.actor.h", "shape": [2], "dtype": "float32", "initial": ["a", "b"]}])),
        "the initial value of state.actor.h is neither"),
}


@pytest.mark.parametrize("name", BAD_EXPORTS)
def test_a_corrupt_or_hostile_export_is_refused_by_name(tmp_path, exported, name):
    import torch

    from embodirl.app.exported import load_export
    from embodirl.errors import CheckpointError

    spoil, fragment = BAD_EXPORTS[name]
    directory = spoil(Path(shutil.copytree(exported["torchscript"], tmp_path / "copy")))
    with pytest.raises(CheckpointError, match="Fix: export it again with embodirl-export") as caught:
        load_export(directory, torch.device("cpu"))
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_a_corrupt_export_is_one_line_and_exit_2_before_the_checkpoint_is_read(cli, tmp_path, exported):
    directory = _write(Path(shutil.copytree(exported["torchscript"], tmp_path / "copy")), "policy.pt", "PK junk")
    result = cli("embodirl-eval", [f"export={directory}", *EVAL, f"hydra.run.dir={tmp_path / 'eval'}"])
    assert result.code == 2 and result.out == "", result.err
    assert result.err.strip() == (f"embodirl-eval: error: {directory / 'policy.pt'} is not a TorchScript file "
                                  "torch.jit.load reads (PytorchStreamReader failed reading zip archive: not a ZIP "
                                  "archive). Fix: export it again with embodirl-export "
                                  "run=<run dir> out=<a new directory>")


def test_a_directory_without_a_manifest_is_one_line(cli, tmp_path):
    result = cli("embodirl-eval", [f"export={tmp_path}", *EVAL, f"hydra.run.dir={tmp_path / 'eval'}"])
    assert result.code == 2 and result.err.strip() == (
        f"embodirl-eval: error: export='{tmp_path}' is invalid: expected a directory written by embodirl-export "
        "(holding manifest.json). Fix: pass export=<run dir>/export/onnx (or /torchscript), written by "
        "embodirl-export run=<run>.")


@needs_onnx
@pytest.mark.slow  # an ONNX export (see FORMATS)
def test_a_truncated_onnx_file_is_one_line(cli, tmp_path, exported_onnx):
    directory = Path(shutil.copytree(exported_onnx["onnx"], tmp_path / "copy"))
    (directory / "policy.onnx").write_bytes((directory / "policy.onnx").read_bytes()[:300])
    result = cli("embodirl-eval", [f"export={directory}", *EVAL, f"hydra.run.dir={tmp_path / 'eval'}"])
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1
    assert "policy.onnx is not an ONNX model onnxruntime reads" in result.err


@pytest.mark.parametrize(("args", "fragments"), [
    (["run={run}", "env=push_cube"], ["env='push_cube' is invalid",
                                      "a second env, env=NAME, is for an export's sim-to-sim",
                                      "Fix: drop env=push_cube (or set a key, e.g. env.num_envs=8)"]),
    (["export={export}", "eval.video=true"], ["eval.video=True is invalid", "with export="]),
    (["export={moved}"], ["export='{moved}' is invalid: expected an export whose checkpoint is present",
                          "Fix: pass run=<the run dir> checkpoint="]),
])
def test_bad_uses_of_export_are_one_line(cli, tmp_path, exported, args, fragments):
    moved = Path(shutil.copytree(exported["torchscript"], tmp_path / "moved"))
    manifest = json.loads((moved / "manifest.json").read_text())
    (moved / "manifest.json").write_text(json.dumps({**manifest, "checkpoint": str(tmp_path / "gone.pt")}))
    subst = {"export": exported["torchscript"], "moved": moved, "run": exported["run"]}
    result = cli("embodirl-eval", [a.format(**subst) for a in args] + EVAL + [f"hydra.run.dir={tmp_path / 'eval'}"])
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1, result.err
    for fragment in fragments:
        assert fragment.format(**subst) in result.err


def test_a_moved_export_runs_beside_the_checkpoint_run_names(cli, tmp_path, exported):
    moved = Path(shutil.copytree(exported["torchscript"], tmp_path / "moved"))
    manifest = json.loads((moved / "manifest.json").read_text())
    (moved / "manifest.json").write_text(json.dumps({**manifest, "checkpoint": None, "extra": {"from": "later"}}))
    result = cli("embodirl-eval", [f"export={moved}", f"run={exported['run']}", "checkpoint=last", *EVAL,
                                   f"hydra.run.dir={tmp_path / 'eval'}"])
    assert result.code == 0, result.err
    rows = json.loads((tmp_path / "eval" / "eval.json").read_text())["rows"]
    assert rows[1]["eval/return_mean"] == pytest.approx(rows[0]["eval/return_mean"], rel=1e-5)


@pytest.mark.slow  # trains a second run
def test_a_recurrent_export_carries_its_state_and_repeats_the_checkpoint(cli, tmp_path):
    from embodirl.cli.export import export_checkpoint

    run_training(compose_config([*TINY, "policy=actor_critic_rnn"]), tmp_path / "run")
    export_checkpoint(compose_config([f"run={tmp_path / 'run'}", "format=torchscript", f"out={tmp_path / 'ts'}"],
                                     "export"))
    result = cli("embodirl-eval", [f"export={tmp_path / 'ts'}", *EVAL, f"hydra.run.dir={tmp_path / 'eval'}"])
    assert result.code == 0, result.err
    checkpoint, export = json.loads((tmp_path / "eval" / "eval.json").read_text())["rows"]
    assert export["eval/return_mean"] == pytest.approx(checkpoint["eval/return_mean"], rel=1e-5)
    assert export["eval/length_mean"] == checkpoint["eval/length_mean"]
