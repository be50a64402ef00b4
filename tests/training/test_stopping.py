"""Stop conditions: parsing with one-line errors, thresholds, plateaus by hand, metric-name checks."""

import pytest

from embodirl.config.schema import parse
from embodirl.config.training import TrainerConfig
from embodirl.errors import ConfigError
from embodirl.training.stopping import MetricNames, Plateau, StopConditions, Threshold, stop_conditions


def parse_stop_on(entries):
    """``trainer.stop_on`` checked by the trainer's schema, as conditions."""
    return stop_conditions(parse(TrainerConfig, {"stop_on": entries}, "trainer.").stop_on)


def test_parse_builds_thresholds_and_plateaus_with_defaults():
    conditions = parse_stop_on([{"metric": "eval/return_mean", "op": ">=", "value": 400},
                                {"metric": "loss/value", "plateau": {"patience_evals": 3, "mode": "min"}}])
    assert conditions == [Threshold("eval/return_mean", ">=", 400.0), Plateau("loss/value", 3, 0.0, "min")]
    assert parse_stop_on([]) == []


@pytest.mark.parametrize(("item", "key"), [
    ({"metric": "eval/return_mean", "op": "=>", "value": 1}, "trainer.stop_on[0].op"),
    ({"metric": "eval/return_mean", "op": ">=", "value": "high"}, "trainer.stop_on[0].value"),
    ({"metric": "eval/return_mean", "op": ">=", "value": float("inf")}, "trainer.stop_on[0].value"),
    ({"metric": "eval/return_mean", "op": ">=", "value": 1, "mode": "max"}, "trainer.stop_on[0].mode"),
    ({"metric": "eval/return_mean", "op": ">="}, "trainer.stop_on[0].value"),
    ({"metric": "eval/return_mean", "op": ">=", "plateau": {"patience_evals": 2}}, "trainer.stop_on[0].op"),
    ({"op": ">=", "value": 1}, "trainer.stop_on[0].metric"),
    ({"metric": "", "op": ">=", "value": 1}, "trainer.stop_on[0].metric"),
    ({"metric": "eval/return_mean", "plateau": {"patience_evals": 0}}, "trainer.stop_on[0].plateau.patience_evals"),
    ({"metric": "eval/return_mean", "plateau": {"patience_evals": 2, "min_delta": -1}},
     "trainer.stop_on[0].plateau.min_delta"),
    ({"metric": "eval/return_mean", "plateau": {"patience_evals": 2, "mode": "up"}},
     "trainer.stop_on[0].plateau.mode"),
    ({"metric": "eval/return_mean", "plateau": {"patience": 2}}, "trainer.stop_on[0].plateau.patience"),
    ("eval/return_mean>=4", "trainer.stop_on[0]"),
])
def test_bad_entries_name_their_key(item, key):
    with pytest.raises(ConfigError) as info:
        parse_stop_on([item])
    assert info.value.key == key and "\n" not in str(info.value)


@pytest.mark.parametrize(("op", "expected"), [(">=", [False, True, True]), (">", [False, False, True]),
                                              ("<=", [True, True, False]), ("<", [True, False, False]),
                                              ("==", [False, True, False])])
def test_threshold_compares_the_records_value(op, expected):
    stops = StopConditions([Threshold("eval/return_mean", op, 10.0)])
    met = [stops.update({"eval/return_mean": v}, {}) is not None for v in (9.0, 10.0, 11.0)]
    assert met == expected


def test_threshold_ignores_records_without_the_metric():
    stops = StopConditions([Threshold("eval/return_mean", "<", 10.0)])
    assert stops.update({"env_steps": 5, "eval/return_mean": None}, {}) is None
    assert stops.update({"eval/return_mean": 3.0}, {}) == "eval/return_mean < 10 (value 3)"


def test_plateau_counts_values_that_do_not_beat_the_best_by_min_delta():
    stops = StopConditions([Plateau("eval/return_mean", patience_evals=2, min_delta=1.0)])
    state = {}
    # best 10; 10.5 (+0.5 <= 1: stale 1); 12 (+2 > 1: best 12, stale 0); 12.9 (stale 1); 11 (stale 2: stop).
    results = [stops.update({"eval/return_mean": v}, state) for v in (10.0, 10.5, 12.0, 12.9, 11.0)]
    assert results[:4] == [None] * 4
    assert results[4] == "eval/return_mean plateau: no gain > 1 in 2 values (best 12)"
    assert state == {"eval/return_mean plateau: no gain > 1 in 2 values": [12.0, 2]}


def test_plateau_in_min_mode_wants_the_metric_to_fall():
    stops = StopConditions([Plateau("loss/value", patience_evals=1, mode="min")])
    state = {}
    assert stops.update({"loss/value": 5.0}, state) is None
    assert stops.update({"loss/value": 4.0}, state) is None  # fell: new best
    assert stops.update({"loss/value": 4.5}, state) is not None


def test_metric_names_unknown_before_training_is_refused_at_once():
    with pytest.raises(ConfigError, match=r"trainer.stop_on\[0\].metric='eval/retrun_mean'.*eval/return_mean"):
        MetricNames([("trainer.stop_on[0].metric", "eval/retrun_mean")], ["eval/return_mean"], ("loss/",), [])


def test_metric_names_deferred_ones_are_checked_by_the_first_record_or_evaluation():
    names = MetricNames([("a", "loss/value"), ("b", "eval/success_rate")], ["eval/return_mean"], ("loss/",),
                        ["eval/success_rate"])
    names.observe({"loss/value": 1.0}, evaluated=False)  # success is only decided by an evaluation
    assert names.pending == [("b", "eval/success_rate")]
    with pytest.raises(ConfigError, match="b='eval/success_rate'"):
        names.observe({"loss/value": 1.0, "eval/return_mean": 3.0}, evaluated=True)
    names = MetricNames([("c", "loss/valeu")], [], ("loss/",), [])
    with pytest.raises(ConfigError, match=r"c='loss/valeu'.*loss/value"):
        names.observe({"loss/value": 1.0}, evaluated=False)
