"""embodirl-report on a small real sweep: grouping, mean ± std and IQM over seeds, mixed run states, curves
without survivorship bias, corrupt files, bad input."""

import contextlib
import io
import json
import shutil
import statistics
import subprocess
import sys

import pytest
import yaml

from embodirl.analysis.curves import SeedCurve, draw_curves, mean_curve, seed_curve
from embodirl.analysis.report import group_runs, iqm_interval, load_run, load_runs, summarize
from embodirl.analysis.stats import format_estimate, format_interval, format_number, stratified_bootstrap_ci
from embodirl.cli.report import main
from embodirl.runtime.status import write_status
from tests.conftest import in_process_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RUN_TIMEOUT_S = 300  # the whole sweep; a hang fails the session instead of blocking it
SWEEP = ["-m", "algo.learning_rate=1e-3,2e-3,-1", "seed=0,1", "trainer=debug", "env.num_envs=8", "algo.num_steps=16",
         "trainer.total_env_steps=512", "eval.every_env_steps=128", "logger.console=none",
         "logger.tensorboard=false", "device=cpu"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A real multirun: 2 learning rates x 2 seeds that complete, and an invalid learning rate that fails.

    embodirl-train runs in this process (one sweep for the module, so not the function-scoped ``cli`` fixture)."""
    from embodirl.cli.train import main

    root = tmp_path_factory.mktemp("report")
    sweep_dir = root / "sweep"
    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, in_process_run(RUN_TIMEOUT_S), contextlib.redirect_stdout(stdout), \
            contextlib.redirect_stderr(stderr), pytest.raises(SystemExit) as exited:
        patch.chdir(root)
        patch.setenv("WANDB_MODE", "offline")
        patch.setattr(sys, "argv", ["embodirl-train", *SWEEP, f"hydra.sweep.dir={sweep_dir}"])
        main()
    assert exited.value.code == 1, stderr.getvalue()  # the failing point fails the multirun, by design
    assert "2 of 6 sweep jobs did not complete" in stderr.getvalue()
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
        rows.append(dict(zip(headers, (c.strip() for c in line.strip("|").split(" | ")), strict=True)))
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
        assert row["eval return"] == format_estimate(mean, std)
        assert row["eval return IQM [95% CI]"] == format_interval(*stratified_bootstrap_ci([returns]))
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
    assert row["eval return"] == format_estimate(statistics.fmean(returns), statistics.stdev(returns))
    per_run = {r["run"]: r for r in table(stdout, "run")}
    assert per_run["later/a/0"]["status"] == "running" and per_run["later/a/0"]["seed"] == "2"
    assert per_run["later/a/0"]["env steps"] == "256"  # the torn third line is skipped
    assert per_run["later/a/0"]["eval return"] == format_number(latest["eval/return_mean"])
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
    assert row["eval success"] == format_number(lines[-1]["eval/success_rate"], 3)
    assert row["eval success IQM [95% CI]"] == format_number(lines[-1]["eval/success_rate"], 3)  # one seed: no CI
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


def test_mean_curve_holds_stopped_seeds_and_ends_running_ones():
    # seed a: steps 0, 10 (values 0, 10); seed b: steps 0, 20 (values 0, 40) -> grid 0, 10, 20.
    # At 10: a = 10, b interpolated = 20 -> mean 15. At 20: b = 40 and a, if it completed, holds 10 -> mean 25;
    # if a is still running it has no value there -> mean 40 over n = 1.
    held = mean_curve([SeedCurve([0, 10], [0, 10], stopped=True), SeedCurve([0, 20], [0, 40], stopped=False)])
    assert held.env_steps == [0, 10, 20] and held.mean == [0, 15, 25]
    assert held.num_seeds == [2, 2, 2] and held.num_held == [0, 0, 1]
    running = mean_curve([SeedCurve([0, 10], [0, 10], stopped=False), SeedCurve([0, 20], [0, 40], stopped=True)])
    assert running.mean == [0, 15, 40] and running.num_seeds == [2, 2, 1] and running.num_held == [0, 0, 0]
    # A seed starting later contributes nothing before its first point.
    late = mean_curve([SeedCurve([0, 20], [2, 4], stopped=True), SeedCurve([10, 20], [8, 8], stopped=True)])
    assert late.mean == [2, 5.5, 6] and late.num_seeds == [1, 2, 2]
    assert mean_curve([SeedCurve([], [], stopped=True)]) is None


def solved_early(run_dir, keep_lines, value):
    """Make a completed run stop early: only its first ``keep_lines`` metric lines, the last one at ``value``."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][:keep_lines]
    lines[-1]["eval/return_mean"] = value
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    summary = json.loads((run_dir / "summary.json").read_text())
    summary.update({"env_steps": lines[-1]["env_steps"], "eval/return_mean": value})
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return lines[-1]


def test_a_seed_that_stops_early_does_not_pull_the_mean_down(sweep, tmp_path):
    # The case: the best seed solves and stops; averaging only the seeds still running made the
    # curve "collapse". Here seed 0 stops at its second evaluation with a high return.
    root = tmp_path / "runs"
    fast = copy_run(sweep / "0", root / "0", seed=0)  # jobs 0 and 1: algo.learning_rate=1e-3, seeds 0 and 1
    copy_run(sweep / "1", root / "1", seed=1)
    last = solved_early(fast, keep_lines=2, value=1000.0)
    runs = load_runs(root)
    assert len(group_runs(runs)) == 1
    curves = [seed_curve(r) for r in runs]
    curve = mean_curve(curves)
    slow_curve = next(c for c in curves if c.seed == "1")
    after = [i for i, x in enumerate(curve.env_steps) if x > last["env_steps"]]
    assert after, "the slow seed must have evaluations after the fast one stopped"
    for i in after:  # both seeds behind every point: the fast one at its held final value
        x = curve.env_steps[i]
        slow_value = slow_curve.values[slow_curve.env_steps.index(x)]
        assert curve.num_seeds[i] == 2 and curve.num_held[i] == 1
        assert curve.mean[i] == pytest.approx((1000.0 + slow_value) / 2)


def test_titles_and_legends_say_what_is_plotted(sweep, tmp_path):
    single = load_run(copy_run(sweep / "0", tmp_path / "one", seed=0))
    fig = draw_curves([[single]], ["all runs"])
    title = fig.axes[0].get_title()
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert title == "eval/return_mean: one run" and legend == ["all runs: seed 0", "solved threshold 475"]

    runs = load_runs(sweep)
    groups = [g for g in group_runs(runs) if g[0].params["algo.learning_rate"] != "-1"]
    fig = draw_curves(groups, ["lr 1e-3", "lr 2e-3"])
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "mean over seeds" in fig.axes[0].get_title() and "held" not in fig.axes[0].get_title()
    assert legend == ["lr 1e-3: mean of 2 seeds", "lr 2e-3: mean of 2 seeds", "solved threshold 475"]

    solved_early(copy_run(sweep / "0", tmp_path / "two" / "0", seed=0), keep_lines=2, value=20.0)
    copy_run(sweep / "1", tmp_path / "two" / "1", seed=1)
    fig = draw_curves(group_runs(load_runs(tmp_path / "two")), ["all runs"])
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["all runs: mean of 2 seeds, 1 stopped early and held", "solved threshold 475"]
    assert "keeps its final value" in fig.axes[0].get_title()


def test_iqm_interval_of_a_configuration():
    assert iqm_interval([]) == (None, None, None) and iqm_interval([4.0]) == (4.0, None, None)
    assert iqm_interval([0.0, 10.0]) == (5.0, 0.0, 10.0)  # see tests/test_stats.py for the hand computation


def test_non_utf8_metrics_line_is_skipped_with_one_warning(sweep, tmp_path, capsys):
    run = copy_run(sweep / "0", tmp_path / "runs" / "0", seed=0)
    lines = (run / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    lines[1] = lines[1][:30] + b"\xff\xfe" + lines[1][30:]  # invalid UTF-8 inside the second line
    lines[2] = b"\x80garbage\n"
    (run / "metrics.jsonl").write_bytes(b"".join(lines))
    assert main([str(tmp_path / "runs"), "--per-run"]) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if line]
    assert len(warnings) == 1, captured.err
    assert warnings[0].startswith("embodirl-report: warning: ") and str(run / "metrics.jsonl") in warnings[0]
    assert "skipped 2 lines" in warnings[0] and "(line 2, 3)" in warnings[0]
    row = table(captured.out, "run")[0]
    assert row["status"] == "completed" and row["env steps"] == "512"
    assert len(load_run(run).metrics) == len(lines) - 2


@pytest.mark.parametrize("content", [b'{"status": ["completed"]}', b'{"status": 5}', b'{"status": null}',
                                     b'{"status": "compl\xff"}', b"not json", b"[1, 2]"])
def test_unreadable_status_is_unknown_with_one_warning(sweep, tmp_path, capsys, content):
    run = copy_run(sweep / "0", tmp_path / "runs" / "0", seed=0)
    (run / "status.json").write_bytes(content)
    assert main([str(tmp_path / "runs"), "--per-run"]) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if line]
    assert len(warnings) == 1 and str(run / "status.json") in warnings[0] and "'unknown'" in warnings[0], captured.err
    row = table(captured.out, "configuration")[0]
    assert row["seeds"] == "0/1" and row["status"] == "1 unknown"  # listed, not averaged
    assert table(captured.out, "run")[0]["status"] == "unknown"
