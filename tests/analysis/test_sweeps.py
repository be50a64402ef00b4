"""embodirl-report's held-out sweep section: runs evaluated with ``embodirl-eval ... eval.sweep.*``."""

from __future__ import annotations

import pytest

from tests.conftest import TINY


@pytest.mark.slow  # four training runs and their held-out sweeps
def test_the_report_tables_and_draws_each_configuration_s_sweep(cli, tmp_path):
    from embodirl.cli.report import write_report

    root = tmp_path / "runs"
    configurations = {"nominal": [], "randomized": ["+env.randomize.pole_length={range: [0.5, 2.0]}"]}
    for name, extra in configurations.items():
        for seed in (0, 1):
            run = root / f"{name}_{seed}"
            assert cli("embodirl-train", [*TINY, *extra, f"seed={seed}", f"hydra.run.dir={run}"]).code == 0
            result = cli("embodirl-eval", [f"run={run}", "num_episodes=4", "device=cpu",
                                           "eval.sweep.param=pole_length", "eval.sweep.values=[0.5,1,2]"])
            assert result.code == 0, result.err
    _, _, written = write_report(root, tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## Held-out sweeps" in text and "### `pole_length` (relative): `eval/return_mean`" in text
    table = text.split("### `pole_length`")[1].split("\n\n")[1].splitlines()
    assert table[0].startswith("| value | ") and len(table) == 2 + 3  # header, rule, the values 0.5, 1, 2
    assert [row.split("|")[1].strip() for row in table[2:]] == ["0.5", "1", "2"]
    assert all(row.count("(n=2)") == 2 for row in table[2:])  # both configurations, both seeds
    assert tmp_path / "report" / "sweep_pole_length_relative.png" in written
    assert (tmp_path / "report" / "sweep_pole_length_relative.png").read_bytes()[:4] == b"\x89PNG"
