"""Building a run: seeds, the top-level keys, integral floats, impossible sizes."""

import pytest

from embodirl.app.build import (
    EVAL_SEED_OFFSET,
    RANK_SEED_STRIDE,
    allocation_guard,
    eval_seed,
    rank_seed,
)
from embodirl.config.run import check_run_config
from embodirl.config.schema import NO_MATCH, conform
from embodirl.errors import ConfigError
from tests.conftest import compose_config


def test_evaluation_seeds_never_equal_a_ranks_training_seed():
    assert EVAL_SEED_OFFSET % RANK_SEED_STRIDE != 0
    training = {rank_seed(seed, rank) % 2**32 for seed in range(200) for rank in range(256)}
    assert not training & {eval_seed(seed) % 2**32 for seed in range(200)}  # the envs hash seeds to 32 bits


def test_top_level_keys_are_exactly_the_composed_config_keys():
    import dataclasses

    from embodirl.config.run import RunConfig

    assert set(compose_config([])) == {f.name for f in dataclasses.fields(RunConfig)}


def test_unknown_top_level_key_is_refused():
    with pytest.raises(ConfigError, match=r"foo=1 is invalid.*top-level key.*remove it with ~foo"):
        check_run_config(compose_config(["+foo=1"]))


def test_integral_floats_are_accepted_as_ints():
    assert conform(1e5, int) == 100_000 and isinstance(conform(1e5, int), int)
    assert conform(1.5, int) is NO_MATCH and conform(True, int) is NO_MATCH
    assert conform([6.4e1, 64], list[int]) == [64, 64]
    assert check_run_config(compose_config(["seed=3.0"])).seed == 3


def test_an_impossible_allocation_is_a_config_error():
    import torch

    expected = r"env.num_envs=1000000000000 is invalid.*fit in memory.*lower env.num_envs"
    with pytest.raises(ConfigError, match=expected), allocation_guard("env.num_envs", 10**12, "lower env.num_envs"):
        torch.zeros(10**12, 4)


def _eval_env(overrides):
    import torch

    from embodirl.app.build import build_eval_env

    cfg = compose_config(overrides)
    run = check_run_config(cfg)
    return cfg, build_eval_env(run.env, run.eval_config(), torch.device("cpu"), seed=0)


def test_eval_env_overrides_apply_to_the_evaluation_env_only():
    cfg, eval_env = _eval_env(["eval.env_overrides={max_episode_steps: 7}", "env.solved_threshold=3",
                               "eval.num_envs=2"])
    assert eval_env.max_episode_steps == 7 and eval_env.num_envs == 2 and eval_env.solved_threshold == 3.0
    assert cfg.env.max_episode_steps == 500  # the caller's config is not changed


@pytest.mark.parametrize(("override", "key"), [
    ("{max_episode_steps: -1}", "eval.env_overrides.max_episode_steps=-1"),
    ("{max_episode_stepz: 9}", "eval.env_overrides.max_episode_stepz=9"),
    ("{num_envs: 4}", "eval.env_overrides.num_envs=4"),
])
def test_bad_eval_env_overrides_name_their_key(override, key):
    with pytest.raises(ConfigError) as info:
        _eval_env([f"eval.env_overrides={override}", "eval.num_envs=2"])
    assert str(info.value).startswith(key) and "Fix:" in str(info.value)
