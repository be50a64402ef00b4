"""IQM, stratified-bootstrap intervals and number formatting against hand-computed values."""

import numpy as np
import pytest

from embodirl.analysis.stats import (
    format_count,
    format_estimate,
    format_interval,
    format_number,
    iqm,
    stratified_bootstrap_ci,
)


def test_iqm_hand_values():
    assert iqm([1, 2, 3, 4, 5, 6, 7, 8]) == 4.5  # cut 8 // 4 = 2 per end: mean(3, 4, 5, 6)
    assert iqm([10, 0, 1, 2, 3]) == 2.0  # sorted 0 1 2 3 10, cut 1 per end: mean(1, 2, 3)
    assert iqm([1, 2, 3, 100]) == 2.5  # the outlier is cut: mean(2, 3)
    assert iqm([5, 1, 3]) == 3.0  # fewer than four values: nothing cut, the plain mean
    assert iqm([[1, 2], [3, 100]]) == 2.5  # axis=None flattens (runs x tasks), as rliable does
    np.testing.assert_allclose(iqm([[1, 2, 3, 100], [4, 4, 4, 4], [9, 1, 5, 3]], axis=1), [2.5, 4.0, 4.0])
    with pytest.raises(ValueError, match="no values"):
        iqm([])


def test_iqm_equals_scipy_trim_mean():
    trim_mean = pytest.importorskip("scipy.stats").trim_mean
    rng = np.random.default_rng(0)
    for n in range(1, 30):
        values = rng.normal(size=n) * 100
        assert iqm(values) == pytest.approx(trim_mean(values, 0.25))
    batch = rng.normal(size=(7, 13))
    np.testing.assert_allclose(iqm(batch, axis=1), trim_mean(batch, 0.25, axis=1))


def test_bootstrap_two_runs_hand_computed():
    # Two runs 0 and 10: a resample of two is {0, 0} (p = 1/4), {0, 10} (1/2) or {10, 10} (1/4), so its mean
    # (= IQM, nothing is cut from two values) is 0, 5 or 10; the 2.5 % and 97.5 % percentiles are 0 and 10.
    assert stratified_bootstrap_ci([[0.0, 10.0]]) == (5.0, 0.0, 10.0)
    assert stratified_bootstrap_ci([[0.0, 10.0]], statistic=np.mean) == (5.0, 0.0, 10.0)
    assert stratified_bootstrap_ci([[3.0, 3.0, 3.0]]) == (3.0, 3.0, 3.0)
    assert stratified_bootstrap_ci([[7.0]]) == (7.0, 7.0, 7.0)


def test_bootstrap_resamples_within_strata_only():
    # Stratified: every resample keeps four runs of each task, so the joined scores are always
    # 0 0 0 0 10 10 10 10 and their IQM (cut 2 per end: 0 0 10 10) is exactly 5. Pooling the strata would vary.
    point, low, high = stratified_bootstrap_ci([[0, 0, 0, 0], [10, 10, 10, 10]])
    assert (point, low, high) == (5.0, 5.0, 5.0)
    pooled = stratified_bootstrap_ci([[0, 0, 0, 0, 10, 10, 10, 10]])
    assert pooled[0] == 5.0 and pooled[1] < 5.0 < pooled[2]


def test_bootstrap_matches_a_plain_loop_and_is_seeded():
    strata = [np.array([1.0, 4.0, 2.0, 8.0, 5.0]), np.array([-3.0, 0.5, 9.0])]
    num_resamples, seed = 200, 3
    rng = np.random.default_rng(seed)
    draws = [rng.integers(0, len(s), size=(num_resamples, len(s))) for s in strata]
    estimates = []
    for r in range(num_resamples):
        sample = sorted(float(v) for s, d in zip(strata, draws, strict=True) for v in s[d[r]])
        cut = len(sample) // 4
        middle = sample[cut:len(sample) - cut]
        estimates.append(sum(middle) / len(middle))
    expected_low, expected_high = np.percentile(estimates, [2.5, 97.5])
    point, low, high = stratified_bootstrap_ci(strata, num_resamples=num_resamples, seed=seed)
    assert point == 3.0  # sorted -3 0.5 1 2 4 5 8 9, cut 2 per end: mean(1, 2, 4, 5)
    assert (low, high) == pytest.approx((expected_low, expected_high))
    assert stratified_bootstrap_ci(strata, seed=1) == stratified_bootstrap_ci(strata, seed=1)
    few = {"num_resamples": 50}  # with 10,000 the percentiles of these few discrete values coincide
    assert stratified_bootstrap_ci(strata, seed=1, **few) != stratified_bootstrap_ci(strata, seed=2, **few)


def test_bootstrap_rejects_bad_arguments():
    with pytest.raises(ValueError, match="empty stratum"):
        stratified_bootstrap_ci([[1.0], []])
    with pytest.raises(ValueError, match=r"confidence=1\.5"):
        stratified_bootstrap_ci([[1.0]], confidence=1.5)
    with pytest.raises(ValueError, match="num_resamples=0"):
        stratified_bootstrap_ci([[1.0]], num_resamples=0)


def test_format_number_significant_digits():
    assert format_number(0.0014050388998463588) == "0.001405"
    assert format_number(499.8) == "499.8"
    assert format_number(9.0) == "9.000"
    assert format_number(0.9, 3) == "0.900"
    assert format_number(-131.83) == "-131.8"
    assert format_number(9.99996) == "10.00"  # rounding up adds a digit in front, not at the end
    assert format_number(163840.4) == "163,840"  # integer digits are never dropped
    assert format_number(1234.6) == "1,235"
    assert format_number(1.4e-7) == "1.400e-07"
    assert format_number(-0.00001) == "-1.000e-05"
    assert format_number(0.0) == "0" and format_number(None) == "-"


def test_format_count():
    assert format_count(163840) == "163,840" and format_count(5004.6) == "5,005" and format_count(None) == "-"


def test_format_estimate_to_the_spread():
    assert format_estimate(499.8, 0.3464) == "499.80 ± 0.35"  # the example
    assert format_estimate(260.123, 45.678) == "260 ± 46"
    assert format_estimate(1234567, 12345) == "1,235,000 ± 12,000"
    assert format_estimate(0.0014, 0.0003) == "0.00140 ± 0.00030"
    assert format_estimate(0.5, 0.0996) == "0.50 ± 0.10"  # 0.0996 rounds to 0.10: two places, not three
    assert format_estimate(-0.0004, 0.02) == "0.000 ± 0.020"  # no "-0.000"
    assert format_estimate(0.5, None) == "0.5000" and format_estimate(500.0, 0.0) == "500.0 ± 0"
    assert format_estimate(172032.0, 0.5, max_decimals=0) == "172,032 ± 0"  # counts keep no decimals
    assert format_estimate(172032.0, None, max_decimals=0) == "172,032"
    assert format_estimate(None, 1.0) == "-"


def test_format_interval_to_the_half_width():
    assert format_interval(480.33, 455.12, 497.04) == "480 [455, 497]"  # half-width 21
    assert format_interval(499.81, 499.5, 500.0) == "499.81 [499.50, 500.00]"  # half-width 0.25
    assert format_interval(0.9, 0.9, 0.9, 3) == "0.900 [0.900, 0.900]"
    assert format_interval(12.34567, None, None) == "12.35" and format_interval(None, 1, 2) == "-"


def test_wilson_and_newcombe_hand_values():
    from embodirl.analysis.stats import rate_difference_interval, wilson_interval

    # Wilson, 0 of 10: centre (0 + z^2/20) / (1 + z^2/10) = 0.1388, half the same: [0, 0.2775].
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.27753), abs=1e-5)
    assert wilson_interval(10, 10) == pytest.approx((0.72247, 1.0), abs=1e-5)
    # Newcombe (1998), Table II, example (a): 56/70 - 48/80 = 0.2, method 10: [0.0524, 0.3339].
    assert rate_difference_interval(56, 70, 48, 80) == pytest.approx((0.0524, 0.3339), abs=1e-4)
    low, high = rate_difference_interval(20, 20, 20, 20)  # equal rates at the edge: an interval around 0
    assert low < 0 < high
    with pytest.raises(ValueError, match="0 <= successes <= n"):
        wilson_interval(11, 10)


def test_wilson_equals_scipy():
    binomtest = pytest.importorskip("scipy.stats").binomtest
    from embodirl.analysis.stats import wilson_interval

    for k, n in [(0, 5), (3, 17), (50, 100), (99, 100), (256, 256)]:
        ci = binomtest(k, n).proportion_ci(0.95, method="wilson")
        assert wilson_interval(k, n) == pytest.approx((ci.low, ci.high), abs=1e-9)


def test_welch_interval_of_two_means():
    from embodirl.analysis.stats import mean_difference_interval

    # population std 3 of 10 episodes: sample variance 9 * 10 / 9 = 10, over 10: 1; twice: se = sqrt(2)
    low, high = mean_difference_interval(5.0, 3.0, 10, 2.0, 3.0, 10)
    assert (low + high) / 2 == pytest.approx(3.0) and (high - low) / 2 == pytest.approx(1.959964 * 2**0.5, abs=1e-5)
    assert mean_difference_interval(1.0, 0.0, 4, 1.0, 0.0, 4) == (0.0, 0.0)
    with pytest.raises(ValueError, match="two or more episodes"):
        mean_difference_interval(1.0, 0.0, 1, 1.0, 0.0, 4)
