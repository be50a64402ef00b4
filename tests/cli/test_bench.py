"""``embodirl-bench``: one progress line per measurement on stderr, the tables alone on stdout."""

from __future__ import annotations

import pytest

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


def test_bench_counts_work_per_step_and_scales_training_over_num_envs(tmp_path, capsys):
    import json

    out_file = tmp_path / "bench.json"
    main(["--presets", "ppo_cartpole", "--seeds", "--envs", "--costs", "cartpole", "--costs-envs", "16", "--scaling",
          "ppo_cartpole", "--scaling-sizes", "8", "16", "--out", str(out_file), "--", "trainer.num_eval_envs=2"])
    out, _ = capsys.readouterr()
    result = json.loads(out_file.read_text())
    (costs,) = result["step_costs"]
    assert costs["env"] == "cartpole" and costs["device"] == "cpu" and costs["num_envs"] == 16
    # The policy's eager act dispatches tens of aten ops, compiled a handful of kernels. CartPole's eager CPU
    # step does its arithmetic in numpy: a few aten ops, but its time is measured all the same.
    assert costs["act_eager"] > 10 and 1 <= costs["act_compiled"] < costs["act_eager"]
    assert 1 <= costs["env_eager"] < 10 and costs["env_compiled"] >= 1
    assert costs["collect_eager"] > costs["env_eager"] + costs["act_eager"]
    assert all(costs[f"{k}_{mode}_us"] > 0 for k in ("env", "act", "collect") for mode in ("eager", "compiled"))
    assert costs["collect_eager_us"] > costs["env_eager_us"]
    assert all(costs[f"{k}_compile_s"] > 0 for k in ("env", "act", "collect"))
    rows = result["scaling"][0]["rows"]
    assert [r["num_envs"] for r in rows] == [8, 16] and all(r["collect_update_sps"] > 0 for r in rows)
    (preset,) = result["results"]
    assert preset["runs"] == [] and preset["median_e2e_sps"] is None and preset["collect_sps"] > 0
    assert "| cartpole | cpu | 16 |" in out and "| ppo_cartpole: num_envs |" in out and "| ppo_cartpole | " in out


def test_bench_runs_embodirl_train_itself_in_fresh_processes(tmp_path, capsys):
    import json

    out_file = tmp_path / "bench.json"
    main(["--presets", "--envs", "--cli-runs", "2", "--out", str(out_file), "--", *TINY])
    out, err = capsys.readouterr()
    runs = json.loads(out_file.read_text())["cli_runs"]
    assert len(runs) == 2 and all(r["wall_time_s"] > 0 and r["e2e_sps"] > 0 for r in runs)
    assert all(r["solved_env_steps"] is None for r in runs)  # 256 env steps cannot solve CartPole
    assert "embodirl-bench [2/2] embodirl-train run 2: " in err
    assert "| 2 runs, fresh processes | " in out and "| not solved, not solved |" in out


def test_a_failing_embodirl_train_run_names_its_error(capsys):
    with pytest.raises(RuntimeError, match="embodirl-train exited with 2.*algo.num_steps"):
        main(["--presets", "--envs", "--cli-runs", "1", "--", *TINY, "algo.num_steps=-1"])
