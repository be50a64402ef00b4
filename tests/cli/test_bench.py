"""``embodirl-bench``: one progress line per measurement on stderr, the tables alone on stdout."""

from __future__ import annotations

from embodirl.cli.bench import main
from tests.conftest import TINY


def test_bench_shows_progress_on_stderr_and_keeps_stdout_for_the_tables(capsys):
    main(["--presets", "ppo_cartpole", "--seeds", "0", "--envs", "cartpole", "--env-sizes", "4", "--", *TINY])
    out, err = capsys.readouterr()
    progress = [line for line in err.splitlines() if line.startswith("embodirl-bench [")]
    assert [line.split(" ...")[0] for line in progress if line.endswith(" ...")] == [
        "embodirl-bench [1/3] cartpole env speed, 4 envs", "embodirl-bench [2/3] ppo_cartpole throughput",
        "embodirl-bench [3/3] ppo_cartpole seed 0: training until solved"]
    assert progress[-1] == "embodirl-bench [3/3] ppo_cartpole seed 0: not solved"  # 256 steps cannot solve it
    assert "embodirl-bench" not in out and "| ppo_cartpole |" in out and "| cartpole |" in out
