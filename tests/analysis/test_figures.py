"""The pictures ``embodirl-report`` draws beyond the eval curves: ``--metric KEY`` (any metrics.jsonl key against env
steps) and ``--frames N`` (frames of a run's latest evaluation video side by side).

The run directories here are written by the test (a metrics.jsonl, a video written by the training's own
``save_video``): they are the input whose pictures are checked.
"""

import json
import os
import sys

import imageio.v3 as iio
import numpy as np
import pytest
import yaml

from embodirl.analysis.curves import draw_curves
from embodirl.analysis.frames import GAP, frame_strip, latest_video, pick_frames
from embodirl.analysis.report import group_runs, load_runs
from embodirl.cli.report import main
from embodirl.training.video import save_video

SIZE = 32  # pixels per frame side


def make_run(path, seed, returns=(10.0, 20.0, 40.0)):
    """A run directory as embodirl-train leaves it: overrides, and one metrics line per iteration."""
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"seed={seed}"]))
    lines = [{"iteration": i, "env_steps": 1000 * (i + 1), "episode/return_mean": r} for i, r in enumerate(returns)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def numbered_frames(count):
    """``count`` frames whose red channel is the frame's index (so a picked frame says which it was)."""
    frames = np.zeros((count, SIZE, SIZE, 3), dtype=np.uint8)
    frames[..., 0] = np.arange(count, dtype=np.uint8)[:, None, None] * 10
    return frames


def strip_indices(png, num):
    """The frame index each tile of a strip shows (from its red channel)."""
    image = iio.imread(png)
    return [round(image[SIZE // 2, i * (SIZE + GAP) + SIZE // 2, 0] / 10) for i in range(num)]


def test_pick_frames_spreads_from_the_first_to_the_last():
    assert pick_frames(51, 6) == [0, 10, 20, 30, 40, 50]
    assert pick_frames(4, 6) == [0, 1, 2, 3]  # fewer frames than asked: each once
    assert pick_frames(2, 2) == [0, 1]


@pytest.mark.parametrize("suffix", [".gif", ".mp4"])
def test_frame_strip_is_one_row_of_the_picked_frames(tmp_path, suffix):
    video = save_video(numbered_frames(11), tmp_path / f"eval{suffix}", fps=10)
    png = frame_strip(video, num_frames=3)
    image = iio.imread(png)
    assert image.shape[:2] == (SIZE, 3 * SIZE + 2 * GAP)
    if suffix == ".gif":  # lossless: the tiles are frames 0, 5 and 10 exactly
        assert strip_indices(png, 3) == [0, 5, 10]


def test_frame_strip_of_a_file_that_is_not_a_video_names_it(tmp_path):
    bad = tmp_path / "eval_1.gif"
    bad.write_bytes(b"not a gif")
    with pytest.raises(ValueError, match=r"eval_1\.gif is not a readable video"):
        frame_strip(bad)


def test_latest_video_is_the_last_written_of_training_and_embodirl_eval(tmp_path):
    assert latest_video(tmp_path) is None
    older = save_video(numbered_frames(2), tmp_path / "videos" / "eval_000000002000.gif", fps=10)
    newer = save_video(numbered_frames(2), tmp_path / "eval" / "2026-01-01_00-00-00" / "video.gif", fps=10)
    os.utime(older, (1, 1))
    assert latest_video(tmp_path) == newer
    os.utime(newer, (0, 0))
    assert latest_video(tmp_path) == older


def test_report_frames_writes_one_strip_per_run_with_a_video(tmp_path, capsys):
    make_run(tmp_path / "sweep" / "0", seed=0)
    run = make_run(tmp_path / "sweep" / "1", seed=1)
    save_video(numbered_frames(21), run / "videos" / "eval_000000003000.gif", fps=10)
    assert main([str(tmp_path / "sweep"), "--frames", "3"]) == 0
    out, err = capsys.readouterr()
    report = tmp_path / "sweep" / "report"
    assert f"wrote {report / 'frames_1.png'}" in out
    assert strip_indices(report / "frames_1.png", 3) == [0, 10, 20]
    assert "![frames of the video](frames_1.png)" in (report / "report.md").read_text()
    assert err.count("\n") == 1 and "sweep/0 wrote no evaluation video" in err  # the other run: one warning


def test_report_frames_without_any_video_exits_2_before_writing(tmp_path, capsys):
    run = make_run(tmp_path / "run", seed=0)
    assert main([str(run), "--frames", "6"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no run under" in err and "Fix: train with eval.video=true" in err
    assert f"embodirl-eval run={run} eval.video=true" in err
    assert not (run / "report").exists()


@pytest.mark.parametrize("value", ["0", "-2", "six"])
def test_report_frames_must_be_a_positive_count(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as exited:
        main([str(tmp_path), "--frames", value])
    assert exited.value.code == 2
    assert f"argument --frames: {value!r} is not a whole number of frames of at least 1" in capsys.readouterr().err


def test_report_metric_draws_that_key_for_each_seed(tmp_path, capsys):
    make_run(tmp_path / "sweep" / "0", seed=0)
    make_run(tmp_path / "sweep" / "1", seed=1, returns=(12.0, 30.0, 60.0))
    assert main([str(tmp_path / "sweep"), "--metric", "episode/return_mean"]) == 0
    report = tmp_path / "sweep" / "report"
    assert f"wrote {report / 'curves_episode_return_mean.png'}" in capsys.readouterr().out
    assert iio.imread(report / "curves_episode_return_mean.png").shape[:2] == (500, 800)
    assert not (report / "curves_return.png").exists()  # no run evaluated: no eval curve
    assert "![episode/return_mean](curves_episode_return_mean.png)" in (report / "report.md").read_text()
    fig = draw_curves(group_runs(load_runs(tmp_path / "sweep")), ["all runs"], "episode/return_mean")
    ax = fig.axes[0]
    assert len(ax.get_lines()) == 3  # each seed thin, their mean bold
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["all runs: mean of 2 seeds"]
    assert ax.get_lines()[-1].get_ydata().tolist() == [11.0, 25.0, 50.0]


def test_report_metric_nobody_logged_names_the_closest_keys(tmp_path, capsys):
    run = make_run(tmp_path / "run", seed=0)
    assert main([str(run), "--metric", "episode/retrun_mean"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--metric 'episode/retrun_mean': no run under" in err
    assert "Fix: pass one of them, e.g. --metric episode/return_mean." in err
    assert not (run / "report").exists()


def test_report_metric_of_a_run_without_metrics_says_so(tmp_path, capsys):
    run = make_run(tmp_path / "run", seed=0)
    (run / "metrics.jsonl").unlink()
    assert main([str(run), "--metric", "episode/return_mean"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has a readable metrics.jsonl" in err and "Fix:" in err


def test_report_without_matplotlib_gives_the_install_line(tmp_path, capsys, monkeypatch):
    run = make_run(tmp_path / "run", seed=0)
    for name in ["matplotlib", *(m for m in sys.modules if m.startswith("matplotlib."))]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed: each import of it raises ImportError
    assert main([str(run), "--metric", "episode/return_mean"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "matplotlib is not installed" in err and "Fix: pip install matplotlib" in err


def test_a_metric_key_from_the_file_is_shown_as_text_in_the_report(tmp_path):
    run = make_run(tmp_path / "run", seed=0)
    key = "info/[a link](http://example.com)"
    (run / "metrics.jsonl").write_text(json.dumps({"env_steps": 1000, key: 1.0}) + "\n")
    assert main([str(run), "--metric", key]) == 0
    report = (run / "report" / "report.md").read_text()
    assert r"![info/\[a link\](http://example.com)](curves_info_a_link_http_example.com.png)" in report
    assert (run / "report" / "curves_info_a_link_http_example.com.png").is_file()


def test_a_metric_key_with_dollar_signs_is_drawn_as_written(tmp_path):
    run = make_run(tmp_path / "run", seed=0)
    key = r"cost/$\frac{$"  # a pair of $ would start matplotlib's mathtext, which cannot parse this
    (run / "metrics.jsonl").write_text(json.dumps({"env_steps": 1000, key: 1.0}) + "\n")
    assert main([str(run), "--metric", key]) == 0
    fig = draw_curves(group_runs(load_runs(run)), ["all runs"], key)
    assert fig.axes[0].get_ylabel() == r"cost/\$\frac{\$"  # escaped: shown as written
