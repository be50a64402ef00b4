"""``embodirl-bench``: one progress line per measurement on stderr, the tables alone on stdout."""

from __future__ import annotations

import pytest

from embodirl.cli.bench import main
from tests.conftest import TINY


@pytest.mark.slow  # a bench run (the page test below is the fast tier's)
def test_bench_shows_progress_on_stderr_and_keeps_stdout_for_the_tables(capsys):
    main(["--presets", "ppo_cartpole", "--seeds", "0", "--envs", "cartpole", "--env-sizes", "4", "--", *TINY])
    out, err = capsys.readouterr()
    progress = [line for line in err.splitlines() if line.startswith("embodirl-bench [")]
    assert [line.split(" ...")[0] for line in progress if line.endswith(" ...")] == [
        "embodirl-bench [1/3] cartpole env speed, 4 envs", "embodirl-bench [2/3] ppo_cartpole throughput",
        "embodirl-bench [3/3] ppo_cartpole seed 0: training until solved"]
    assert progress[-1] == "embodirl-bench [3/3] ppo_cartpole seed 0: not solved"  # 256 steps cannot solve it
    assert "embodirl-bench" not in out and "| ppo_cartpole |" in out and "| cartpole |" in out


@pytest.mark.slow
def test_bench_counts_work_per_step_and_scales_training_over_num_envs(tmp_path, capsys):
    import json

    out_file = tmp_path / "bench.json"
    main(["--presets", "ppo_cartpole", "--seeds", "--envs", "--costs", "cartpole", "--costs-envs", "16", "--scaling",
          "ppo_cartpole", "--scaling-sizes", "8", "16", "--out", str(out_file), "--", "eval.num_envs=2"])
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
    assert all(costs[f"{k}_compile_s"] > 0 for k in ("env", "act", "collect"))
    rows = result["scaling"][0]["rows"]
    assert [r["num_envs"] for r in rows] == [8, 16] and all(r["collect_update_sps"] > 0 for r in rows)
    (preset,) = result["results"]
    assert preset["runs"] == [] and preset["median_e2e_sps"] is None and preset["collect_sps"] > 0
    assert "| cartpole | cpu | 16 |" in out and "| ppo_cartpole: num_envs |" in out and "| ppo_cartpole | " in out


@pytest.mark.slow
def test_bench_runs_embodirl_train_itself_in_fresh_processes(tmp_path, capsys):
    import json

    out_file, page_file = tmp_path / "bench.json", tmp_path / "bench.md"
    main(["--presets", "--envs", "--cli-runs", "2", "--out", str(out_file), "--markdown", str(page_file), "--", *TINY])
    out, err = capsys.readouterr()
    runs = json.loads(out_file.read_text())["cli_runs"]
    assert len(runs) == 2 and all(r["wall_time_s"] > 0 and r["e2e_sps"] > 0 for r in runs)
    # start-up comes first and the process ends last: imports and building, then training, then the exit
    assert all(0 < r["startup_s"] < r["startup_s"] + r["wall_time_s"] <= r["process_s"] for r in runs)
    assert all(r["solved_env_steps"] is None and r["enter_to_solved_s"] is None for r in runs)  # 256 steps: unsolved
    assert "embodirl-bench [2/2] embodirl-train run 2: start-up " in err
    assert "| 2 runs, fresh processes, min / median / max | " in out and "| not solved, not solved |" in out
    startup = sorted(r["startup_s"] for r in runs)
    (cpu_row,) = [row for row in (line.split("|") for line in page_file.read_text().splitlines()) if
                  len(row) > 4 and row[1].strip() == "CPU" and row[3].strip() == "2"]
    assert cpu_row[4].strip() == f"{startup[0]:.2f} / {sum(startup) / 2:.2f} / {startup[1]:.2f}"
    assert cpu_row[5].strip() == "-"  # Enter to solved: not solved


@pytest.mark.slow  # a bench run in a fresh process
def test_a_failing_embodirl_train_run_names_its_error(capsys):
    with pytest.raises(RuntimeError, match=r"embodirl-train exited with 2.*algo\.num_steps"):
        main(["--presets", "--envs", "--cli-runs", "1", "--", *TINY, "algo.num_steps=-1"])


def _page_rows(page: str, first_cell: str) -> dict[str, list[str]]:
    """The rows of the page's tables whose first cell is ``first_cell``, by their device cell."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in page.splitlines() if line.startswith("| ")]
    return {row[1]: row[2:] for row in rows if row[0] == first_cell}


def test_bench_writes_its_results_as_a_markdown_page_with_the_machine_and_settings(tmp_path, capsys):
    import datetime
    import json
    import os
    from importlib.metadata import version

    import torch

    from embodirl.cli.bench import cpu_model

    page_file, out_file = tmp_path / "bench.md", tmp_path / "bench.json"
    main(["--presets", "ppo_cartpole", "--seeds", "0", "--envs", "cartpole", "--env-sizes", "4", "16",
          "--markdown", str(page_file), "--out", str(out_file), "--", *TINY])
    page, measured = page_file.read_text(), json.loads(out_file.read_text())
    header = {row[0]: row[1:] for row in ([c.strip() for c in line.strip("|").split("|")]
                                           for line in page.split("\n## ")[0].splitlines() if line.startswith("| "))}
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    assert header["date"] == [datetime.datetime.now(datetime.timezone.utc).date().isoformat(), "not measured"]
    assert header["embodirl / torch"] == [f"{version('embodirl')} / {torch.__version__}", "not measured"]
    assert header["CPU"] == [f"{cpu_model()}, {os.cpu_count()} cores", "not measured"]
    assert header["GPU"] == [gpu, "not measured"]
    assert header["torch threads"] == ["1", "not measured"]  # the config's num_threads, what every measurement uses
    assert header["compile"][0].startswith("off (eager)")
    assert "`embodirl-bench --presets ppo_cartpole --seeds 0 " in page and "`trainer=debug`" in page

    (speed,) = measured["env_speed"]
    env_rows = _page_rows(page, "`cartpole`")
    assert env_rows["CPU"] == [f"{speed['4']:,.0f}", f"{speed['16']:,.0f}"]
    assert env_rows["GPU"] == ["not measured"] * 2
    (preset,) = measured["results"]
    preset_rows = _page_rows(page, "`ppo_cartpole`")
    assert preset_rows["CPU"][:3] == ["8", f"{preset['collect_sps']:,.0f}", f"{preset['update_sps']:,.0f}"]
    assert preset_rows["CPU"][-1] == "0/1"  # 256 env steps cannot solve CartPole
    assert preset_rows["GPU"] == ["not measured"] * 8

    # A second run on the same device cannot be merged beside this one: refused before anything is measured.
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        main(["--presets", "ppo_cartpole", "--seeds", "0", "--envs", "--markdown", str(tmp_path / "two.md"),
              "--merge", str(out_file), "--", *TINY])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "holds a second CPU run" in err and "Fix:" in err and not (tmp_path / "two.md").exists()


def test_a_merge_file_that_is_not_bench_output_is_refused_in_one_line(tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text('{"results": []}')
    with pytest.raises(SystemExit) as refused:
        main(["--presets", "ppo_cartpole", "--envs", "--markdown", str(tmp_path / "page.md"), "--merge", str(other)])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and err.count("\n") == 1
    assert f"--merge {other} holds no embodirl-bench results" in err and "embodirl-bench --out" in err
    assert "embodirl-bench [" not in err  # nothing was measured


@pytest.mark.gpu
def test_bench_puts_a_gpu_run_beside_a_merged_cpu_run(tmp_path):
    cpu_out, page_file = tmp_path / "cpu.json", tmp_path / "bench.md"
    main(["--presets", "ppo_cartpole", "--seeds", "--envs", "cartpole", "--env-sizes", "16", "--out", str(cpu_out),
          "--", *TINY])
    gpu_tiny = [o for o in TINY if not o.startswith("device=")] + ["device=cuda"]
    main(["--presets", "ppo_cartpole", "--seeds", "--envs", "cartpole", "--env-sizes", "16",
          "--markdown", str(page_file), "--merge", str(cpu_out), "--", *gpu_tiny])
    page = page_file.read_text()
    rows = _page_rows(page, "`ppo_cartpole`")
    assert "not measured" not in rows["CPU"] and "not measured" not in rows["GPU"]
    assert "not measured" not in page.split("\n## ")[0]  # both columns of the header describe a run


def test_the_page_header_reads_threads_from_overrides_meant_for_a_preset():
    from embodirl.cli.bench import run_info

    # env.obs_mode exists for push_cube, not for the default CartPole: describing the run must not compose it.
    assert run_info(["env.obs_mode=rgb"])["threads"] == "1"
    info = run_info(["env.obs_mode=rgb", "num_threads=2", "compile=true"])
    assert (info["threads"], info["compile"]) == ("2", True)


@pytest.mark.slow
def test_bench_times_off_policy_gradient_steps_eager_and_compiled(tmp_path, capsys):
    import json

    out_file = tmp_path / "bench.json"
    small = ["env.num_envs=8", "algo.num_steps=4", "algo.minibatch_size=32", "algo.critic_hidden_sizes=[16]",
             "policy.hidden_sizes=[16]", "eval.num_envs=2"]
    main(["--presets", "--envs", "--updates", "sac_push_cube", "--out", str(out_file), "--", *small])
    out, _ = capsys.readouterr()
    (row,) = json.loads(out_file.read_text())["updates"]
    assert row["preset"] == "sac_push_cube" and row["eager_minibatch_size"] == 32
    assert row["eager_grad_steps_per_s"] > 0 and row["compiled_grad_steps_per_s"] > 0
    assert row["compiled_warmup_s"] > row["eager_warmup_s"]  # the compile happens in the first steps
    assert "| sac_push_cube | 32 |" in out
