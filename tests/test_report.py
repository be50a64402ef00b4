"""embodirl-report on a small real sweep: grouping, mean ± std over seeds, mixed run states, curves, bad input."""

import json
import shutil
import statistics
import subprocess
import sys

import pytest
import yaml

from embodirl.cli.report import main
from embodirl.fate import write_status
from embodirl.report import load_runs, mean_curve, summarize
from tests.conftest import run_cli

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SWEEP = ["-m", "algo.learning_rate=1e-3,2e-3,-1", "seed=0,1", "trainer=debug", "env.num_envs=8", "algo.num_steps=16",
         "trainer.total_env_steps=512", "trainer.eval_every_env_steps=128", "logger.console=none",
         "logger.tensorboard=false", "device=cpu"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A real multirun: 2 learning rates x 2 seeds that complete, and an invalid learning rate that fails."""
    root = tmp_path_factory.mktemp("report")
    sweep_dir = root / "sweep"
    result = run_cli("embodirl-train", [*SWEEP, f"hydra.sweep.dir={sweep_dir}"], cwd=root)
    assert result.returncode == 1, result.stderr  # the failing point fails the multirun, by design
    assert "2 of 6 sweep jobs did not complete" in result.stderr
    return sweep_dir


def table(text, first_header):
    """The rows of the Markdown table whose first header cell is ``first_header``, as dicts."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    headers = [c.strip() for c in lines[start].strip("|").split(" | ")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(headers, (c.strip() for c in line.strip("|").split(" | ")))))
    return rows


def summaries(sweep_dir, learning_rate):
    found = []
    for job in sorted(sweep_dir.iterdir()):
        overrides = yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text()) if job.name.isdigit() else []
        if f"algo.learning_rate={learning_rate}" in overrides:
            found.append(json.loads((job / "summary.json").read_text()))
    return found


def assert_png(path):
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000, path


def copy_run(source, target, seed):
    """A copy of a finished run under another seed (checkpoints left out)."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("checkpoints", "report"))
    overrides = yaml.safe_load((target / ".hydra" / "overrides.yaml").read_text())
    overrides = [f"seed={seed}" if o.startswith("seed=") else o for o in overrides]
    (target / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    return target


def make_unfinished(run_dir, status, keep_lines):
    """Turn a finished run into one still running (or preempted): no summary, fewer metric lines, a torn tail."""
    (run_dir / "summary.json").unlink()
    (run_dir / "status.json").unlink()
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    (run_dir / "metrics.jsonl").write_text("\n".join(lines[:keep_lines]) + "\n" + lines[keep_lines][:40])
    write_status(run_dir, "running")
    if status != "running":
        write_status(run_dir, status)
    return json.loads(lines[keep_lines - 1])


def test_grouped_table_has_mean_and_std_over_seeds_and_the_failure(sweep, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    rows = {row["algo.learning_rate"]: row for row in table(stdout, "algo.learning_rate")}
    assert set(rows) == {"0.001", "0.002", "-1"}
    for lr in ("0.001", "0.002"):
        done = summaries(sweep, lr)
        returns = [s["eval/return_mean"] for s in done]
        mean, std = statistics.fmean(returns), statistics.stdev(returns)
        row = rows[lr]
        assert row["seeds"] == "2/2" and row["status"] == "2 completed"
        assert row["eval return"] == f"{mean:.4g} ± {std:.4g}"
        assert row["solved"] == "0/2 solved"  # 512 env steps cannot solve CartPole
        stats = summarize([r for r in load_runs(sweep) if r.params.get("algo.learning_rate") == lr])
        assert stats.eval_return.mean == pytest.approx(mean) and stats.eval_return.std == pytest.approx(std)
        assert stats.sps.mean == pytest.approx(statistics.fmean(s["sps"] for s in done))
    failed = rows["-1"]
    assert failed["seeds"] == "0/2" and failed["eval return"] == "-"
    assert failed["status"].startswith("2 failed (ConfigError: algo.learning_rate=-1 is invalid")
    report = (out / "report.md").read_text()
    assert str(sweep.resolve()) in report and "`trainer=debug`" in report and "`seed=" not in report
    per_run = {row["run"]: row for row in table(report, "run")}
    assert len(per_run) == 6 and per_run["4"]["status"].startswith("failed: ConfigError: algo.learning_rate=-1")
    assert per_run["0"]["env steps"] == "512"
    assert_png(out / "curves_return.png")
    assert not (out / "curves_success.png").exists()  # CartPole reports no success
    assert f"wrote {out / 'report.md'}" in stdout and f"wrote {out / 'curves_return.png'}" in stdout


def test_mixed_states_running_and_preempted_runs_in_nested_dirs(sweep, tmp_path, capsys):
    root = tmp_path / "all"
    shutil.copytree(sweep, root / "sweep", ignore=shutil.ignore_patterns("checkpoints", "report"))
    running = copy_run(sweep / "0", root / "later" / "a" / "0", seed=2)  # algo.learning_rate=0.001
    latest = make_unfinished(running, "running", keep_lines=2)
    make_unfinished(copy_run(sweep / "0", root / "later" / "a" / "1", seed=3), "preempted", keep_lines=3)
    assert main([str(root), "--out", str(tmp_path / "out"), "--per-run"]) == 0
    stdout = capsys.readouterr().out
    row = next(r for r in table(stdout, "algo.learning_rate") if r["algo.learning_rate"] == "0.001")
    assert row["seeds"] == "2/4" and row["status"] == "2 completed, 1 running, 1 preempted"
    returns = [s["eval/return_mean"] for s in summaries(sweep, "0.001")]  # unfinished runs are not averaged
    assert row["eval return"] == f"{statistics.fmean(returns):.4g} ± {statistics.stdev(returns):.4g}"
    per_run = {r["run"]: r for r in table(stdout, "run")}
    assert per_run["later/a/0"]["status"] == "running" and per_run["later/a/0"]["seed"] == "2"
    assert per_run["later/a/0"]["env steps"] == "256"  # the torn third line is skipped
    assert per_run["later/a/0"]["eval return"] == f"{latest['eval/return_mean']:.4g}"
    assert per_run["later/a/1"]["status"] == "preempted"
    assert per_run["sweep/5"]["status"].startswith("failed: ConfigError")
    assert_png(tmp_path / "out" / "curves_return.png")


def test_success_curves_when_a_run_reports_success(sweep, tmp_path, capsys):
    run = copy_run(sweep / "1", tmp_path / "runs" / "0", seed=1)
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for i, record in enumerate(lines):
        record["eval/success_rate"] = i / len(lines)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "eval/success_rate": lines[-1]["eval/success_rate"]}))
    assert main([str(tmp_path / "runs")]) == 0
    row = table(capsys.readouterr().out, "configuration")[0]
    assert row["eval success"] == f"{lines[-1]['eval/success_rate']:.3g}"
    assert_png(tmp_path / "runs" / "report" / "curves_success.png")
    assert "![eval success rate](curves_success.png)" in (tmp_path / "runs" / "report" / "report.md").read_text()


def test_single_run_directory(sweep, tmp_path, capsys):
    run = copy_run(sweep / "2", tmp_path / "run", seed=0)
    assert main([str(run)]) == 0
    stdout = capsys.readouterr().out
    row = table(stdout, "configuration")[0]
    assert row["configuration"] == "all runs" and row["seeds"] == "1/1" and row["status"] == "1 completed"
    report = (run / "report" / "report.md").read_text()
    assert "`algo.learning_rate=0.002`" in report  # one configuration: every override is common
    assert_png(run / "report" / "curves_return.png")


def test_bad_directories_exit_2_naming_the_path(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([str(empty)]) == 2
    err = capsys.readouterr().err
    assert str(empty) in err and "no runs found" in err and "Fix:" in err
    missing = tmp_path / "missing"
    result = subprocess.run([sys.executable, "-m", "embodirl.cli.report", str(missing)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert str(missing) in result.stderr and "not a directory" in result.stderr and "Fix:" in result.stderr
    assert "Traceback" not in result.stderr and not missing.exists()


def test_mean_curve_stops_each_seed_at_its_last_point():
    # seed a: steps 0, 10 (values 0, 10); seed b: steps 0, 20 (values 0, 40) -> grid 0, 10, 20.
    # At 10: a = 10, b interpolated = 20 -> mean 15, band 10..20. At 20 only b has data -> mean 40.
    curve = mean_curve([([0, 10], [0, 10]), ([0, 20], [0, 40])])
    assert curve.env_steps == [0, 10, 20]
    assert curve.mean == [0, 15, 40] and curve.low == [0, 10, 40] and curve.high == [0, 20, 40]
    assert curve.num_seeds == [2, 2, 1]
    assert mean_curve([([], [])]) is None
