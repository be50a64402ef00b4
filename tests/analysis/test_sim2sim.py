"""The sim-to-sim report: gaps beyond noise named with the interval that says so, and the side-by-side table."""

from __future__ import annotations

import pytest

from embodirl.analysis.sim2sim import RATE_METHOD, RETURN_METHOD, compare, failure_line, print_sim2sim


def _row(policy: str, env: str, rate: float | None, ret: float, std: float, n: int = 100) -> dict:
    return {"policy": policy, "env": env, "eval/success_rate": rate, "eval/return_mean": ret, "eval/return_std": std,
            "eval/num_episodes": float(n)}


def test_compare_names_a_gap_beyond_noise_and_not_one_within_it():
    rows = [_row("checkpoint", "PushCube (training)", 0.95, 2.0, 0.5), _row("export (onnx)", "PushCube (training)",
                                                                           0.93, 1.98, 0.5),
            _row("export (onnx)", "arm", 0.40, 1.0, 0.5)]
    found = {(c["comparison"].split(":")[0], c["metric"]): c for c in compare(rows)}
    same = found[("export vs checkpoint in the training env", "eval/success_rate")]
    assert not same["mismatch"] and same["method"] == RATE_METHOD
    assert same["difference"] == pytest.approx(-0.02) and same["interval"][0] < 0 < same["interval"][1]
    gap = found[("export in arm vs in the training env", "eval/success_rate")]
    assert gap["mismatch"] and gap["interval"][1] < 0
    returns = found[("export in arm vs in the training env", "eval/return_mean")]
    # Welch: -0.98 +- 1.96 * sqrt(0.25 / 99 * 2) = -0.98 +- 0.1393
    assert returns["method"] == RETURN_METHOD and returns["interval"] == pytest.approx([-1.1193, -0.8407], abs=1e-4)
    assert returns["text"] == ("export in arm vs in the training env: eval/return_mean 1 vs 1.98, difference -0.98 "
                               "[-1.119, -0.8407] (Welch's normal interval, 95 %): MISMATCH")


def test_a_failed_check_is_one_line_naming_the_first_gap_and_the_fix_for_its_kind():
    checkpoint, export = _row("checkpoint", "PushCube (training)", 0.95, 2.0, 0.5), \
        _row("export (onnx)", "PushCube (training)", 0.93, 1.98, 0.5)
    assert failure_line(compare([checkpoint, export])) is None  # within noise: the check passes
    line = failure_line(compare([checkpoint, export, _row("export (onnx)", "arm", 0.40, 1.0, 0.5)]))
    assert line is not None and "\n" not in line
    assert line.startswith("sim-to-sim check failed: export in arm vs in the training env: eval/success_rate 0.4 vs "
                           "0.93 differs by -0.53 (95 % interval [")
    assert "excludes zero); 1 more in eval.json's mismatches. Fix: the export matches its checkpoint, the policy " \
           "does not transfer: train with env.randomize" in line
    broken = failure_line(compare([checkpoint, _row("export (onnx)", "PushCube (training)", 0.95, 1.0, 0.5)]))
    assert broken is not None and broken.startswith("sim-to-sim check failed: export vs checkpoint in the training env")
    assert "Fix: export it again from the run (embodirl-export run=<run dir> out=<a new directory>)" in broken


def test_the_side_by_side_report(capsys):
    rows = [_row("checkpoint", "CartPole (training)", None, 500.0, 0.0, 20),
            _row("export (onnx)", "CartPole (training)", None, 500.0, 0.0, 20),
            _row("export (onnx)", "gym id=CartPole-v1", None, 480.0, 40.0, 20)]
    print_sim2sim({"export": "/x/onnx", "rows": rows, "comparisons": compare(rows), "seed": 7,
                   "conditions": "nominal: no randomization"})
    out = capsys.readouterr().out.splitlines()
    assert out[0].strip() == "embodirl-eval export=/x/onnx"
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in out if line.startswith("│")]
    assert cells == [["checkpoint", "CartPole (training)", "-", "500 ± 0", "20"],
                     ["export (onnx)", "CartPole (training)", "-", "500 ± 0", "20"],
                     ["export (onnx)", "gym id=CartPole-v1", "-", "480 ± 40", "20"]]
    assert out[-3] == "conditions: nominal: no randomization; seed 7"
    assert out[-2].endswith("difference +0 [+0, +0] (Welch's normal interval, 95 %): within noise")
    # 1.96 * 40 / sqrt(19) = 17.99: the gap of 20 is beyond noise
    assert out[-1] == ("export in gym id=CartPole-v1 vs in the training env: eval/return_mean 480 vs 500, difference "
                       "-20 [-37.99, -2.014] (Welch's normal interval, 95 %): MISMATCH")
