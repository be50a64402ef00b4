"""Env info metrics: per-episode end values averaged by hand, through the collector, evaluator and trainer."""

import json

import pytest
import torch

from embodirl.app.run import run_training
from embodirl.collect.info_metrics import InfoMetrics
from tests.conftest import compose_config


def test_means_of_the_values_on_episode_ends_by_hand():
    metrics = InfoMetrics(["dist", "reached"], num_envs=3, device=torch.device("cpu"))
    # Step 1: env 0 ends (dist 0.5, reached). Step 2: envs 1 and 2 end (dist 0.1, 0.3; reached only env 2).
    metrics.step({"dist": torch.tensor([0.5, 9.0, 9.0]), "reached": torch.tensor([True, True, False])},
                 torch.tensor([True, False, False]))
    metrics.step({"dist": torch.tensor([9.0, 0.1, 0.3]), "reached": torch.tensor([True, False, True])},
                 torch.tensor([False, True, True]))
    out = metrics.pop("episode/metrics/")
    assert out["episode/metrics/dist"] == pytest.approx((0.5 + 0.1 + 0.3) / 3)
    assert out["episode/metrics/reached"] == pytest.approx(2 / 3)
    assert metrics.pop("episode/metrics/") == {}  # cleared; no episode ended since


def test_a_block_of_steps_counts_as_its_steps_one_by_one():
    metrics = InfoMetrics(["dist", "reached"], num_envs=3, device=torch.device("cpu"))
    infos = [{"dist": torch.tensor([0.5, 9.0, 9.0]), "reached": torch.tensor([True, True, False])},
             {"dist": torch.tensor([9.0, 0.1, 0.3]), "reached": torch.tensor([True, False, True])}]
    ended = torch.tensor([[True, False, False], [False, True, True]])
    metrics.add_steps(torch.stack([metrics.values(info) for info in infos], dim=1), ended)
    out = metrics.pop("eval/metrics/")
    assert out == pytest.approx({"eval/metrics/dist": (0.5 + 0.1 + 0.3) / 3, "eval/metrics/reached": 2 / 3})
    with pytest.raises(KeyError, match="lacks.*reached"):
        metrics.values({"dist": torch.zeros(3)})


def test_a_reduce_sums_over_ranks_before_the_mean():
    metrics = InfoMetrics(["dist"], num_envs=1, device=torch.device("cpu"))
    metrics.step({"dist": torch.tensor([1.0])}, torch.tensor([True]))
    # As if a second rank had counted one episode with dist 3: (1 + 3) / 2.
    assert metrics.pop("eval/metrics/", reduce=lambda s: s + torch.tensor([3.0, 1.0])) == {"eval/metrics/dist": 2.0}


def test_a_declared_key_missing_from_info_names_it():
    metrics = InfoMetrics(["dist"], num_envs=1, device=torch.device("cpu"))
    with pytest.raises(KeyError, match="lacks \\['dist'\\]"):
        metrics.step({"success": torch.tensor([True])}, torch.tensor([True]))


def test_no_keys_costs_nothing_and_logs_nothing():
    metrics = InfoMetrics([], num_envs=2, device=torch.device("cpu"))
    metrics.step({}, torch.tensor([True, True]))
    assert metrics.pop("episode/metrics/") == {}


def test_push_cube_logs_episode_and_eval_info_metrics(tmp_path, tiny):
    cfg = compose_config([*tiny, "env=push_cube", "env.num_envs=8", "trainer.total_env_steps=512",
                          "trainer.eval_every_env_steps=512", "trainer.num_eval_envs=4", "trainer.num_eval_episodes=4",
                          "trainer.stop_on=[{metric: eval/metrics/dist_to_goal, op: '<', value: 0.0}]"])
    summary = run_training(cfg, tmp_path)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    # 50-step episodes, 16 steps per iteration: the first episodes end in the fourth iteration.
    assert [("episode/metrics/dist_to_goal" in r) for r in records] == [False, False, False, True]
    last = records[-1]
    assert 0.0 < last["episode/metrics/dist_to_goal"] < 1.0 and 0.0 <= last["episode/metrics/is_reached"] <= 1.0
    assert 0.0 < last["eval/metrics/dist_to_goal"] < 1.0 and 0.0 <= last["eval/metrics/is_reached"] <= 1.0
    assert summary["stop_reason"] == "total_env_steps"
