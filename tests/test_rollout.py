"""The rollout schema and its validator."""

import pytest
import torch

from embodirl.rollout import ROLLOUT_KEYS, allocate_rollout, transitions, validate_rollout


def test_allocated_rollout_has_the_schema_layout():
    r = allocate_rollout(4, 8, (3,), (), torch.int64, "cpu")
    assert r.batch_size == torch.Size([4, 9])
    assert set(r.keys()) == set(ROLLOUT_KEYS)
    assert r["obs"].shape == (4, 9, 3) and r["action"].dtype == torch.int64
    validate_rollout(r, obs_shape=(3,), action_shape=())


def test_validator_names_the_key_the_shape_and_the_producer():
    r = allocate_rollout(2, 5, (3,), (2,), torch.float32, "cpu")
    del r["sample_log_prob"]
    with pytest.raises(ValueError, match=r"missing key 'sample_log_prob' \(written by policy.get_action\)"):
        validate_rollout(r)
    r = allocate_rollout(2, 5, (3,), (2,), torch.float32, "cpu")
    with pytest.raises(ValueError, match=r"rollout\['obs'\] has shape \[2, 6, 3\], expected \[2, 6, 4\]"):
        validate_rollout(r, obs_shape=(4,))
    r["reward"] = torch.zeros(2, 6, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"rollout\['reward'\] has dtype torch.float64.*env.step"):
        validate_rollout(r)


def test_transition_view_drops_slot_t_and_flattens_env_major():
    r = allocate_rollout(2, 3, (1,), (), torch.int64, "cpu")
    r["reward"] = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    flat = transitions(r, advantage=torch.ones(2, 3))
    assert flat.batch_size == torch.Size([6])
    torch.testing.assert_close(flat["reward"], torch.tensor([0.0, 1, 2, 4, 5, 6]))
    assert flat["advantage"].shape == (6,)
