"""Hydra's ``--experimental-rerun FILE`` unpickles FILE (code runs): both Hydra console scripts refuse it first."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest

from embodirl.cli import evaluate, export, train
from tests.conftest import in_process_run


class _TouchOnLoad:
    """Unpickling this creates ``marker``: the proof that the file's code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


@pytest.mark.parametrize("script", [train, evaluate, export],
                         ids=["embodirl-train", "embodirl-eval", "embodirl-export"])
@pytest.mark.parametrize("form", ["--experimental-rerun {}", "--experimental-rerun={}", "--exp {}",
                                  "--experimental-re={}"])
def test_experimental_rerun_is_refused_before_the_file_is_read(tmp_path, monkeypatch, capsys, script, form):
    marker = tmp_path / "code-ran"
    crafted = tmp_path / "config.pickle"
    crafted.write_bytes(pickle.dumps(_TouchOnLoad(marker)))
    args = form.format(crafted).split()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [script.PROG, *args, f"hydra.run.dir={tmp_path / 'run'}"])
    with in_process_run(timeout_s=60), pytest.raises(SystemExit) as exit_info:
        script.main()
    assert not marker.exists(), "the pickle was loaded"
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"{script.PROG}: error: --experimental-rerun ")
    assert "unpickles" in err and "Fix:" in err
    # train and eval point at the overrides Hydra saved; an export saves none and is repeated with its arguments
    assert ("overrides.yaml" in err) if script is not export else ("embodirl-export run=" in err)
    assert not (tmp_path / "run").exists() and not (tmp_path / "outputs").exists()  # refused before Hydra ran


def test_an_override_that_merely_mentions_the_flag_is_not_refused():
    from embodirl.cli.flags import rerun_flag

    assert rerun_flag(["trainer.callbacks=[]", "logger.wandb.tags=[experimental-rerun]", "-m", "--cfg", "job"]) is None
    assert rerun_flag(["--", "seed=1"]) is None
    assert rerun_flag(["seed=1", "--e", "f"]) == "--e"  # argparse takes any unique prefix of a long option
