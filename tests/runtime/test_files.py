"""embodirl-report and a sweep's end on hostile run directories: FIFOs, /dev/zero, YAML alias bombs, deep nesting,
huge numbers and Markdown injection each give one warning naming the file, promptly, and the other runs are
still reported (see :mod:`embodirl.runtime.files`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import threading

import pytest
import yaml

from embodirl.analysis.report import load_run, md_code, md_text
from embodirl.app.run import run_training
from embodirl.cli.report import main
from embodirl.runtime.files import UnreadableFileError, parse_yaml, read_regular_file
from embodirl.runtime.status import read_status, write_status
from tests.conftest import TINY, compose_config

SLOW = pytest.mark.slow  # the rest of a case table: its representative stays in the fast tier


TIMEOUT_S = 60  # far beyond what a report of two runs takes; a read that blocks or never ends exceeds it
NESTED = "[" * 100_000 + "]" * 100_000
BIG_INT = int("9" * 400)



@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A real finished run (evaluated at 128 and 256 env steps)."""
    from omegaconf import OmegaConf

    run_dir = tmp_path_factory.mktemp("hostile") / "run"
    overrides = [*TINY, "logger.tensorboard=false"]
    cfg = compose_config(overrides)
    run_training(cfg, run_dir, {"config.yaml": OmegaConf.to_yaml(cfg), "overrides.yaml": OmegaConf.to_yaml(overrides)})
    return run_dir


def two_runs(finished, root):
    """``root/0`` (left intact) and ``root/1`` (seed 1, for the test to spoil): one configuration, two seeds."""
    for seed in (0, 1):
        shutil.copytree(finished, root / str(seed), ignore=shutil.ignore_patterns("checkpoints", ".lock"))
        overrides = root / str(seed) / ".hydra" / "overrides.yaml"
        overrides.write_text(yaml.safe_dump([*yaml.safe_load(overrides.read_text()), f"seed={seed}"]))
    return root / "1"


def promptly(call, *, fifo=None):
    """``call()`` in a thread; fails the test (instead of hanging the suite) when it has not returned in
    ``TIMEOUT_S``, then unblocks a reader waiting on ``fifo`` so the thread can end."""
    outcome = {}

    def target():
        try:
            outcome["value"] = call()
        except BaseException as exc:  # re-raised in the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(TIMEOUT_S)
    if thread.is_alive():
        if fifo is not None:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # a waiting reader sees the end of the file
        pytest.fail(f"no return within {TIMEOUT_S} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def report(root, capsys, fifo=None):
    """Run ``embodirl-report ROOT --per-run``; ``(warning lines, stdout)`` once it returned 0."""
    assert promptly(lambda: main([str(root), "--per-run"]), fifo=fifo) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if line]
    assert all(line.startswith("embodirl-report: warning: ") for line in warnings), captured.err
    return warnings, captured.out


def per_run(stdout):
    """The rows of the per-run table, ``{run: {header: cell}}``."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| run |"))
    headers = [cell.strip() for cell in lines[start].strip("|").split(" | ")]
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        assert len(cells) == len(headers), line  # no cell added or lost
        rows[cells[0]] = dict(zip(headers, cells, strict=True))
    return rows


def assert_the_intact_run_is_reported(stdout, root):
    row = per_run(stdout)["0"]
    evaluated = json.loads((root / "0" / "summary.json").read_text())["eval/return_mean"]
    assert (row["status"], row["env steps"]) == ("completed", "256"), row
    assert float(row["eval return"]) == pytest.approx(evaluated, abs=5e-3), row  # its last evaluation, as reported
    assert (root / "report" / "report.md").is_file()


@pytest.mark.parametrize("name", ["metrics.jsonl", *(pytest.param(name, marks=SLOW) for name in  # one stands for all
                                                    ("status.json", "summary.json", ".hydra/overrides.yaml"))])
def test_a_fifo_is_refused_without_waiting_for_a_writer(finished, tmp_path, capsys, name):
    spoilt = two_runs(finished, tmp_path)
    (spoilt / name).unlink()
    os.mkfifo(spoilt / name)
    warnings, stdout = report(tmp_path, capsys, fifo=spoilt / name)
    assert len(warnings) == 1 and str(spoilt / name) in warnings[0] and "a FIFO" in warnings[0], warnings
    assert_the_intact_run_is_reported(stdout, tmp_path)
    assert "1" in per_run(stdout)  # the spoilt run is listed with what could be read


def test_metrics_linked_to_dev_zero_is_refused_without_reading(finished, tmp_path, capsys):
    spoilt = two_runs(finished, tmp_path)
    (spoilt / "metrics.jsonl").unlink()
    (spoilt / "metrics.jsonl").symlink_to("/dev/zero")
    warnings, stdout = report(tmp_path, capsys)
    assert len(warnings) == 1 and str(spoilt / "metrics.jsonl") in warnings[0], warnings
    assert "a character device, not a regular file" in warnings[0]
    assert_the_intact_run_is_reported(stdout, tmp_path)


def test_a_yaml_alias_bomb_is_refused_without_expanding_it(finished, tmp_path, capsys):
    spoilt = two_runs(finished, tmp_path)
    lines = ["- &a0 [x, x, x, x, x, x, x, x, x, x]"]  # 10^31 items once expanded
    lines += [f"- &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 31)]
    (spoilt / ".hydra" / "overrides.yaml").write_text("\n".join(lines) + "\n")
    warnings, stdout = report(tmp_path, capsys)
    assert len(warnings) == 1 and str(spoilt / ".hydra" / "overrides.yaml") in warnings[0], warnings
    assert "an alias (*a0)" in warnings[0]
    assert_the_intact_run_is_reported(stdout, tmp_path)


@pytest.mark.parametrize(("name", "content"), [("status.json", NESTED),
                                               pytest.param("summary.json", NESTED, marks=SLOW),
                                               pytest.param(".hydra/overrides.yaml", NESTED, marks=SLOW)])
def test_deeply_nested_files_are_refused(finished, tmp_path, capsys, name, content):
    spoilt = two_runs(finished, tmp_path)
    (spoilt / name).write_text(content)
    warnings, stdout = report(tmp_path, capsys)
    assert len(warnings) == 1 and str(spoilt / name) in warnings[0] and "nested more than 32 deep" in warnings[0]
    assert_the_intact_run_is_reported(stdout, tmp_path)


def test_a_deeply_nested_metrics_line_is_skipped(finished, tmp_path, capsys):
    spoilt = two_runs(finished, tmp_path)
    with open(spoilt / "metrics.jsonl", "a") as file:
        file.write(NESTED + "\n")
    warnings, stdout = report(tmp_path, capsys)
    assert len(warnings) == 1 and str(spoilt / "metrics.jsonl") in warnings[0] and "(line 3)" in warnings[0]
    assert (per_run(stdout)["1"]["status"], per_run(stdout)["1"]["env steps"]) == ("completed", "256")


def test_400_digit_integers_count_as_missing_values(finished, tmp_path, capsys):
    spoilt = two_runs(finished, tmp_path)
    summary = json.loads((spoilt / "summary.json").read_text())
    summary.update({"eval/return_mean": BIG_INT, "env_steps": BIG_INT, "sps": -BIG_INT})
    (spoilt / "summary.json").write_text(json.dumps(summary))
    with open(spoilt / "metrics.jsonl", "a") as file:
        file.write(json.dumps({"env_steps": BIG_INT, "eval/return_mean": BIG_INT}) + "\n")
    warnings, stdout = report(tmp_path, capsys)
    assert warnings == []  # valid JSON: the values are out of range, shown as missing ("-")
    row = per_run(stdout)["1"]
    assert (row["status"], row["env steps"], row["eval return"], row["steps/s"]) == ("completed", "-", "-", "-")
    assert_the_intact_run_is_reported(stdout, tmp_path)


@pytest.mark.parametrize("sign", [1, pytest.param(-1, marks=SLOW)])
def test_values_near_the_float_limit_give_numbers_not_tracebacks(finished, tmp_path, capsys, sign):
    spoilt = two_runs(finished, tmp_path)
    for run in (tmp_path / "0", spoilt):  # both seeds: their sum overflows
        summary = json.loads((run / "summary.json").read_text())
        summary.update({key: sign * 1.7e308 for key in ("eval/return_mean", "sps", "solved_env_steps")})
        (run / "summary.json").write_text(json.dumps(summary))
    records = [json.loads(line) for line in (spoilt / "metrics.jsonl").read_text().splitlines()]
    lines = [json.dumps({**r, "eval/return_mean": sign * 1.7e308, "env_steps": r["env_steps"] * 1e306})
             for r in records]
    (spoilt / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    warnings, stdout = report(tmp_path, capsys)
    assert warnings == []
    grouped = stdout.splitlines()[2].split(" | ")
    assert grouped[:4] == ["| all runs", "2/2", "2 completed", f"{sign * 1.7e308:.3e} ± 0"]  # mean of two equal values
    assert per_run(stdout)["0"]["eval return"] == f"{sign * 1.7e308:.3e}"
    assert (tmp_path / "report" / "curves_return.png").stat().st_size > 0  # seed 0's metrics are drawn


def test_strings_from_files_cannot_inject_markdown_or_html(finished, tmp_path, capsys):
    spoilt = two_runs(finished, tmp_path)
    note = "algo.note=[click](https://example.com) <img src=x onerror=alert(1)> $\\frac{$"
    for run, hostile in ((tmp_path / "0", ["`x` | y"]), (spoilt, ["`x` | y", note])):  # `x` | y: common to both
        overrides = yaml.safe_load((run / ".hydra" / "overrides.yaml").read_text())
        (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([*overrides, *hostile]))
    write_status(spoilt, "failed", exc=RuntimeError("**bold** ![img](x.png) <script>alert(1)</script>\x1b[31m"))
    warnings, stdout = report(tmp_path, capsys)
    assert warnings == []
    text = (tmp_path / "report" / "report.md").read_text()
    for raw in ("[click](", "<script>", "**bold**", "![img]", "\x1b"):
        assert raw not in text, raw
    assert not re.search(r"(?<!\\)<img", text)
    assert "\\[click\\](https://example.com) \\<img src=x onerror=alert(1)\\>" in text
    assert ("failed: RuntimeError: \\*\\*bold\\*\\* !\\[img\\](x.png) \\<script\\>alert(1)\\</script\\>"
            "\ufffd\\[31m") in text  # the terminal escape character replaced
    assert "Common overrides: " in text and " `` `x` | y= ``\n" in text  # a longer fence around the backticks
    assert sorted(per_run(stdout)) == ["0", "1"]  # and no cell added (checked by per_run)
    assert (tmp_path / "report" / "curves_return.png").stat().st_size > 0  # "$...$" drawn as text, not maths


def test_md_text_keeps_ordinary_names_readable():
    assert md_text("algo.learning_rate=0.001") == "algo.learning_rate=0.001"
    assert md_text("_private_ a*b ~x~ $1 &amp;") == "\\_private\\_ a\\*b \\~x\\~ \\$1 \\&amp;"
    assert md_text("line one\nline two\t\x07") == "line one line two \ufffd"
    assert md_code("a`b") == "``a`b``" and md_code("`x`") == "`` `x` ``"


def test_metrics_beyond_the_cap_are_read_from_their_end(finished, tmp_path, capsys, monkeypatch):
    import embodirl.analysis.report as report_module

    spoilt = two_runs(finished, tmp_path)
    lines = (spoilt / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    monkeypatch.setattr(report_module, "MAX_METRICS_BYTES", len(lines[-1]) + 10)  # the last line and a bit
    warnings, _ = report(tmp_path, capsys)
    assert len(warnings) == 2 and all("only its last" in w for w in warnings), warnings  # each run's file
    assert str(spoilt / "metrics.jsonl") in warnings[1] and f"({len(lines[0]):,} bytes before them" in warnings[1]
    assert [record["env_steps"] for record in load_run(spoilt).metrics] == [256]  # the last line, whole


def test_the_sweep_end_reports_every_job_despite_a_fifo_status(finished, tmp_path, capsys):
    from omegaconf import OmegaConf

    from embodirl.app.sweep import SweepFate

    spoilt = two_runs(finished, tmp_path)
    (spoilt / "status.json").unlink()
    os.mkfifo(spoilt / "status.json")
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}, "objective": "eval/return_mean"})

    def end():
        with pytest.raises(SystemExit) as info:
            SweepFate().on_multirun_end(config)
        return info.value.code

    assert promptly(end, fifo=spoilt / "status.json") == 1  # the job whose status is unreadable did not complete
    captured = capsys.readouterr()
    assert "1 of 2 sweep jobs did not complete" in captured.err and "job 1 [" in captured.err
    assert "] an unreadable status.json (see " in captured.err
    assert "│   0 │" in captured.out and "completed" in captured.out


def test_a_run_starting_over_a_fifo_status_replaces_it(tmp_path):
    os.mkfifo(tmp_path / "status.json")
    assert promptly(lambda: read_status(tmp_path), fifo=tmp_path / "status.json") is None
    promptly(lambda: write_status(tmp_path, "running"), fifo=tmp_path / "status.json")
    assert read_status(tmp_path)["status"] == "running"


def test_read_regular_file_is_bounded(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 101)
    assert read_regular_file(path, 101) == b" " * 101
    with pytest.raises(UnreadableFileError, match="larger than the 100 bytes"):
        read_regular_file(path, 100)
    with pytest.raises(FileNotFoundError):
        read_regular_file(tmp_path / "missing.json")
    with pytest.raises(UnreadableFileError, match="a directory"):
        read_regular_file(tmp_path)


def test_parse_yaml_keeps_anchors_but_refuses_aliases():
    assert parse_yaml(b"- &a x\n- y\n") == ["x", "y"]
    with pytest.raises(ValueError, match=r"an alias \(\*a\)"):
        parse_yaml(b"- &a [1, 2]\n- *a\n")
    with pytest.raises(ValueError):
        parse_yaml(b"- !!python/object/apply:os.system ['true']\n")


if sys.platform == "win32":  # pragma: no cover - FIFOs and /dev/zero are POSIX
    pytestmark = pytest.mark.skip(reason="POSIX files")
