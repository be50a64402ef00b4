"""The end of a multirun: one table of its jobs, the embodirl-report command, then the failures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from embodirl.runtime.sweep import report_command
from tests.conftest import TINY, in_process_run


def test_report_command_is_quoted_for_the_shell():
    assert report_command(Path("multirun/2026-11-23/10-00-00-000001")) == (
        "embodirl-report multirun/2026-11-23/10-00-00-000001")
    assert report_command(Path("/data/my sweeps/x")) == "embodirl-report '/data/my sweeps/x'"


def test_a_multirun_ends_with_one_table_then_the_report_command_then_the_failures(tmp_path, monkeypatch, capsys):
    from embodirl.cli.train import main

    sweep = tmp_path / "sweep"
    monkeypatch.setattr(sys, "argv", ["embodirl-train", "-m", "algo.learning_rate=2e-3,-1", *TINY,
                                      f"hydra.sweep.dir={sweep}"])
    monkeypatch.setattr(sys, "stderr", sys.stdout)  # one stream, to check the order of table and failure lines
    with in_process_run(120), pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 1
    out = capsys.readouterr().out
    table = out[out.index(f"sweep {sweep}  (every job: "):]  # the overrides all jobs share: in the title
    assert "env.num_envs=8" in table.split("┏")[0]
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]] for line in table.splitlines()
            if line.startswith("│")}
    assert list(rows) == ["0", "1"]
    assert rows["0"][:2] == ["algo.learning_rate=0.002", "completed"]  # as Hydra records the override
    assert float(rows["0"][2]) > 0 and rows["0"][3] == "256" and rows["0"][4].endswith(" s")
    assert rows["1"] == ["algo.learning_rate=-1", "failed: ConfigError", "-", "-", "-"]
    assert table.index(report_command(sweep)) < table.index("1 of 2 sweep jobs did not complete")
