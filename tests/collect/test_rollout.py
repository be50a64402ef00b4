"""The rollout schema and its validator."""

import pytest
import torch

from embodirl.collect.rollout import ROLLOUT_KEYS, allocate_rollout, transitions, validate_rollout

STATE = {("state",): ((3,), torch.float32)}
PIXELS_AND_STATE = {("rgb",): ((8, 8, 3), torch.uint8), ("agent", "qpos"): ((6,), torch.float32)}


def test_allocated_rollout_has_the_schema_layout():
    r = allocate_rollout(4, 8, STATE, (), torch.int64, "cpu")
    assert r.batch_size == torch.Size([4, 9])
    assert set(r.keys()) == set(ROLLOUT_KEYS)
    assert r["obs", "state"].shape == (4, 9, 3) and r["action"].dtype == torch.int64
    validate_rollout(r, STATE, action_shape=())


def test_each_observation_key_keeps_its_dtype_and_nesting():
    r = allocate_rollout(2, 4, PIXELS_AND_STATE, (2,), torch.float32, "cpu")
    assert r["obs", "rgb"].dtype == torch.uint8 and r["obs", "rgb"].shape == (2, 5, 8, 8, 3)
    assert r["obs", "agent", "qpos"].shape == (2, 5, 6)
    validate_rollout(r, PIXELS_AND_STATE, (2,))
    r["obs", "rgb"] = torch.zeros(2, 5, 8, 8, 3)
    wrong = r"rollout\['obs', 'rgb'\] has shape \[2, 5, 8, 8, 3\] and dtype torch.float32"
    with pytest.raises(ValueError, match=wrong):
        validate_rollout(r, PIXELS_AND_STATE, (2,))
    r["obs", "rgb"] = torch.zeros(2, 5, 8, 8, 3, dtype=torch.uint8)
    del r["obs", "agent", "qpos"]
    with pytest.raises(ValueError, match=r"missing key 'agent.qpos'"):
        validate_rollout(r, PIXELS_AND_STATE, (2,))


def test_validator_names_the_key_the_shape_and_the_producer():
    r = allocate_rollout(2, 5, STATE, (2,), torch.float32, "cpu")
    del r["sample_log_prob"]
    with pytest.raises(ValueError, match=r"missing key 'sample_log_prob' \(written by the collector \(policy.act\)\)"):
        validate_rollout(r)
    r = allocate_rollout(2, 5, STATE, (2,), torch.float32, "cpu")
    with pytest.raises(ValueError, match=r"rollout\['obs', 'state'\] has shape \[2, 6, 3\].*expected \[2, 6, 4\]"):
        validate_rollout(r, {("state",): ((4,), torch.float32)})
    r["reward"] = torch.zeros(2, 6, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"rollout\['reward'\] has dtype torch.float64.*env.step"):
        validate_rollout(r)


def test_a_recurrent_state_gets_its_own_key():
    from tensordict import TensorDict

    state = TensorDict({"h": torch.ones(4, 16)}, batch_size=[4])
    r = allocate_rollout(4, 8, STATE, (), torch.int64, "cpu", policy_state=state)
    assert r["policy_state", "h"].shape == (4, 9, 16) and not r["policy_state", "h"].any()


def test_transition_view_drops_slot_t_and_flattens_env_major():
    r = allocate_rollout(2, 3, {("state",): ((1,), torch.float32)}, (), torch.int64, "cpu")
    r["reward"] = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    flat = transitions(r, advantage=torch.ones(2, 3))
    assert flat.batch_size == torch.Size([6])
    torch.testing.assert_close(flat["reward"], torch.tensor([0.0, 1, 2, 4, 5, 6]))
    assert flat["advantage"].shape == (6,)
