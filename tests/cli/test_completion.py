"""Shell completion: every group, ``experiment`` and ``sweep`` included, is proposed as ``group=`` (no ``+``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from embodirl.cli.completion import completion_request, current_word, rewrite_choices


def test_rewrite_choices_offers_a_group_with_subgroups_as_group_and_folder():
    hydra = ["algo", "algo.", "experiment=", "hydra/", "seed=", "sweep=", "~algo"]
    assert rewrite_choices(hydra, "") == ["algo=", "algo/", "algo.", "experiment=", "hydra/", "seed=", "sweep=",
                                          "~algo"]
    assert rewrite_choices(["experiment="], "exp") == ["experiment="]
    assert rewrite_choices(["experiment=ppo_cartpole", "experiment=ppo_pendulum"], "experiment=ppo_c") == [
        "experiment=ppo_cartpole"]
    assert rewrite_choices(["seed=", "hydra/launcher="], "") == ["seed=", "hydra/launcher="]  # keys untouched


def test_completion_request_and_current_word():
    assert completion_request(["-sc", "install=bash"]) == "install"
    assert completion_request(["--shell-completion", "query=bash"]) == "query"
    assert completion_request(["-sc", "install=fish"]) is None  # fish is Hydra's
    assert completion_request(["query=bash"]) is None  # an override, not a completion request
    assert current_word("embodirl-train algo=ppo exp") == "exp"
    assert current_word("embodirl-train algo=ppo ") == ""
    assert current_word("embodirl-train") == ""


def _query(line: str, monkeypatch, capsys) -> list[str]:
    """Run the entry point as the completion script does: ``COMP_LINE=... embodirl-train -sc query=bash``."""
    from embodirl.cli.train import main

    monkeypatch.setenv("COMP_LINE", line)
    monkeypatch.setenv("COMP_POINT", str(len(line)))
    monkeypatch.setattr(sys, "argv", ["embodirl-train", "-sc", "query=bash"])
    main()
    return capsys.readouterr().out.split()


def test_query_proposes_every_group_without_a_plus(monkeypatch, capsys):
    first = _query("embodirl-train ", monkeypatch, capsys)
    assert {"experiment=", "sweep=", "debug=", "algo=", "env=", "seed="} <= set(first)
    assert not [word for word in first if word.startswith("+")]
    assert _query("embodirl-train exp", monkeypatch, capsys) == ["experiment="]
    assert _query("embodirl-train algo=grpo experiment=ppo_p", monkeypatch, capsys) == [
        "experiment=ppo_pendulum", "experiment=ppo_push_cube", "experiment=ppo_push_cube_4k",
        "experiment=ppo_push_cube_arm", "experiment=ppo_push_cube_dr", "experiment=ppo_push_cube_rgb",
        "experiment=ppo_push_cube_teacher"]
    assert _query("embodirl-train sw", monkeypatch, capsys) == ["sweep="]
    assert _query("embodirl-train algo=", monkeypatch, capsys) == [
        "algo=a2c", "algo=distill", "algo=fasttd3", "algo=grpo", "algo=ppo", "algo=sac"]


@pytest.mark.slow  # a bash and a Python process
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_installed_bash_function_completes_exp_to_experiment(tmp_path):
    """``eval "$(embodirl-train -sc install=bash)"``, then TAB after ``exp`` as bash would call the function."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "embodirl-train").write_text(f"#!/bin/sh\nexec {sys.executable} -m embodirl.cli.train \"$@\"\n")
    (bin_dir / "embodirl-train").chmod(0o755)
    script = ('eval "$(embodirl-train -sc install=bash)"; complete -p embodirl-train; '
              'COMP_LINE="embodirl-train env=cartpole exp"; COMP_POINT=${#COMP_LINE}; '
              '_embodirl_train_completion; echo "reply: ${COMPREPLY[*]}"; '
              'eval "$(embodirl-train -sc uninstall=bash)"; complete -p embodirl-train || echo removed')
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120, env=env,
                            cwd=Path(tmp_path))
    lines = result.stdout.splitlines()
    assert lines[0] == "complete -o default -o nospace -F _embodirl_train_completion embodirl-train", result.stderr
    assert lines[1] == "reply: experiment=" and lines[2] == "removed"
