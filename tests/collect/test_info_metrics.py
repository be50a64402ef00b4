"""Env info metrics: per-episode end values averaged by hand, through the collector, evaluator and trainer."""

import json

import pytest
import torch

from embodirl.app.run import run_training
from embodirl.collect.info_metrics import InfoMetrics
from tests.conftest import compose_config

INFOS = [{"dist": torch.tensor([0.5, 9.0, 9.0]), "reached": torch.tensor([True, True, False])},
         {"dist": torch.tensor([9.0, 0.1, 0.3]), "reached": torch.tensor([True, False, True])}]


def test_means_of_the_values_on_episode_ends_by_hand():
    metrics = InfoMetrics(["dist", "reached"], num_envs=3, device=torch.device("cpu"))
    # Step 1: env 0 ends (dist 0.5, reached). Step 2: envs 1 and 2 end (dist 0.1, 0.3; reached only env 2).
    ended = torch.tensor([[True, False, False], [False, True, True]])
    metrics.add_steps(torch.stack([metrics.values(info) for info in INFOS]), ended)
    out = metrics.pop("episode/metrics/")
    assert out == pytest.approx({"episode/metrics/dist": (0.5 + 0.1 + 0.3) / 3, "episode/metrics/reached": 2 / 3})
    assert metrics.pop("episode/metrics/") == {}  # cleared; no episode ended since


def test_blocks_of_steps_add_up_as_one_block():
    ended = torch.tensor([[True, False, False], [False, True, True]])
    one, two = (InfoMetrics(["dist", "reached"], num_envs=3, device=torch.device("cpu")) for _ in range(2))
    values = torch.stack([one.values(info) for info in INFOS])
    one.add_steps(values, ended)
    for k in range(2):
        two.add_steps(values[k : k + 1], ended[k : k + 1])
    assert one.pop("eval/metrics/") == two.pop("eval/metrics/")


def test_a_reduce_sums_over_ranks_before_the_mean():
    metrics = InfoMetrics(["dist"], num_envs=1, device=torch.device("cpu"))
    metrics.add_steps(metrics.values({"dist": torch.tensor([1.0])}).unsqueeze(0), torch.tensor([[True]]))
    # As if a second rank had counted one episode with dist 3: (1 + 3) / 2.
    assert metrics.pop("eval/metrics/", reduce=lambda s: s + torch.tensor([3.0, 1.0])) == {"eval/metrics/dist": 2.0}


def test_a_declared_key_missing_from_info_names_it():
    metrics = InfoMetrics(["dist", "reached"], num_envs=1, device=torch.device("cpu"))
    with pytest.raises(KeyError, match="lacks \\['reached'\\]"):
        metrics.values({"dist": torch.tensor([1.0]), "success": torch.tensor([True])})


def test_no_keys_logs_nothing():
    metrics = InfoMetrics([], num_envs=2, device=torch.device("cpu"))
    metrics.add_steps(torch.zeros(1, 2, 0), torch.tensor([[True, True]]))
    assert metrics.pop("episode/metrics/") == {}


def test_push_cube_logs_episode_and_eval_info_metrics(tmp_path, tiny):
    cfg = compose_config([*tiny, "env=push_cube", "env.num_envs=8", "trainer.total_env_steps=512",
                          "eval.every_env_steps=512", "eval.num_envs=4", "eval.num_episodes=4",
                          "trainer.stop_on=[{metric: eval/metrics/dist_to_goal, op: '<', value: 0.0}]"])
    summary = run_training(cfg, tmp_path)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    # 50-step episodes, 16 steps per iteration: the first episodes end in the fourth iteration.
    assert [("episode/metrics/dist_to_goal" in r) for r in records] == [False, False, False, True]
    last = records[-1]
    assert 0.0 < last["episode/metrics/dist_to_goal"] < 1.0 and 0.0 <= last["episode/metrics/is_reached"] <= 1.0
    assert 0.0 < last["eval/metrics/dist_to_goal"] < 1.0 and 0.0 <= last["eval/metrics/is_reached"] <= 1.0
    assert summary["stop_reason"] == "total_env_steps"
