"""The replay ring: wrap-around keeps the newest transitions in order, uniform sampling over what is stored, n-step
returns by hand (an episode end and the newest transition stop the sum), fixed shapes, state round trip."""

import pytest
import torch
from tensordict import TensorDict

from embodirl.collect.replay import ReplayBuffer


def block(rewards, done=None, terminated=None, start_obs=0.0):
    """A ``[N, T]`` block whose obs of transition t is its reward (so samples can be traced back) and next_obs is
    obs + 100."""
    reward = torch.as_tensor(rewards, dtype=torch.float32)
    n, t = reward.shape
    done = torch.zeros(n, t, dtype=torch.bool) if done is None else torch.as_tensor(done)
    terminated = torch.zeros(n, t, dtype=torch.bool) if terminated is None else torch.as_tensor(terminated)
    return TensorDict({"obs": TensorDict({"state": reward[..., None] + start_obs}, [n, t]),
                       "action": torch.zeros(n, t, 2), "reward": reward, "done": done, "terminated": terminated,
                       "next_obs": TensorDict({"state": reward[..., None] + 100.0}, [n, t])}, batch_size=[n, t])


def test_wrap_around_keeps_the_newest_transitions_of_each_env_in_order():
    buffer = ReplayBuffer(capacity=8, num_envs=2, device="cpu")  # 4 slots per env
    buffer.extend(block([[1.0, 2.0, 3.0], [11.0, 12.0, 13.0]]))
    assert len(buffer) == 6 and buffer.pos == 3
    buffer.extend(block([[4.0, 5.0], [14.0, 15.0]]))  # slot 3, then slot 0 (overwrites 1 and 11)
    assert len(buffer) == 8 and buffer.pos == 1
    assert buffer.storage["reward"].tolist() == [[5.0, 2.0, 3.0, 4.0], [15.0, 12.0, 13.0, 14.0]]
    state = buffer.state_dict()  # oldest first
    assert state["storage"]["reward"].tolist() == [[2.0, 3.0, 4.0, 5.0], [12.0, 13.0, 14.0, 15.0]]
    assert state["storage"]["obs/state"].shape == (2, 4, 1)  # plain tensors by key, as weights_only loads them
    restored = ReplayBuffer(capacity=8, num_envs=2, device="cpu")
    restored.load_state_dict(state)
    assert len(restored) == 8 and restored.pos == 0
    assert torch.equal(restored.state_dict()["storage"]["reward"], state["storage"]["reward"])


def test_sampling_is_uniform_over_the_stored_transitions_only():
    torch.manual_seed(0)
    buffer = ReplayBuffer(capacity=20, num_envs=2, device="cpu")  # 10 slots per env, 3 filled
    buffer.extend(block([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    batch = buffer.sample(6000)
    assert batch.batch_size == torch.Size([6000])  # the shape never depends on the data
    counts = torch.bincount(batch["reward"].long(), minlength=7)[1:]
    assert counts.sum() == 6000 and counts.min() > 850 and counts.max() < 1150  # 1000 each
    torch.testing.assert_close(batch["obs", "state"][:, 0], batch["reward"])  # whole transitions, not mixed rows
    torch.testing.assert_close(batch["discount"], torch.full((6000,), 0.99))


def test_n_step_returns_by_hand():
    gamma = 0.5
    buffer = ReplayBuffer(capacity=5, num_envs=1, device="cpu", n_step=3, gamma=gamma)
    # one env: rewards 1, 2, 4, 8, 16; transition 2 ends its episode by termination
    buffer.extend(block([[1.0, 2.0, 4.0, 8.0, 16.0]], done=[[False, False, True, False, False]],
                        terminated=[[False, False, True, False, False]]))
    expected = {  # t: (return, index of the last transition summed, m)
        0: (1 + 0.5 * 2 + 0.25 * 4, 2, 3),  # 2.0; stops at 3 steps and at the episode end
        1: (2 + 0.5 * 4, 2, 2),  # 4.0; the episode ended at transition 2: transition 3 is another episode's
        2: (4.0, 2, 1),
        3: (8 + 0.5 * 16, 4, 2),  # 16.0; transition 4 is the newest stored
        4: (16.0, 4, 1),
    }
    rewards = [1.0, 2.0, 4.0, 8.0, 16.0]
    torch.manual_seed(0)
    batch = buffer.sample(200)
    seen = set()
    for i in range(200):
        t = rewards.index(batch["obs", "state"][i, 0].item())
        ret, last, m = expected[t]
        assert batch["reward"][i].item() == pytest.approx(ret)
        assert batch["next_obs", "state"][i, 0].item() == rewards[last] + 100.0
        assert batch["terminated"][i].item() == (last == 2)
        assert batch["discount"][i].item() == pytest.approx(gamma ** m)
        seen.add(t)
    assert seen == set(expected)


def test_n_step_returns_follow_a_row_across_the_ring_end():
    buffer = ReplayBuffer(capacity=4, num_envs=1, device="cpu", n_step=2, gamma=0.5)
    buffer.extend(block([[1.0, 2.0, 4.0]]))
    buffer.extend(block([[8.0, 16.0]]))  # 8 in slot 3, 16 in slot 0 (overwrites 1): ring order 2, 4, 8, 16
    torch.manual_seed(1)
    batch = buffer.sample(100)
    by_obs = {o: r for o, r in zip(batch["obs", "state"][:, 0].tolist(), batch["reward"].tolist(), strict=True)}
    assert by_obs == {2.0: 2 + 0.5 * 4, 4.0: 4 + 0.5 * 8, 8.0: 8 + 0.5 * 16, 16.0: 16.0}  # 8 reads slot 0 next


def test_refuses_a_block_of_other_envs_and_sampling_an_empty_buffer():
    buffer = ReplayBuffer(capacity=8, num_envs=2, device="cpu")
    with pytest.raises(RuntimeError, match="empty"):
        buffer.sample(4)
    with pytest.raises(ValueError, match=r"\[num_envs=2, T\] block, got \[3, 2\]"):
        buffer.extend(block([[1.0, 2.0]] * 3))


@pytest.mark.parametrize("n_step", [1, 3])
def test_a_bonus_of_the_next_observations_is_added_to_each_summed_reward(n_step):
    # A bonus equal to the transition's own reward (next_obs = reward + 100): every sampled return doubles.
    buffer = ReplayBuffer(capacity=5, num_envs=1, device="cpu", n_step=n_step, gamma=0.5)
    buffer.extend(block([[1.0, 2.0, 4.0, 8.0, 16.0]], done=[[False, False, True, False, False]]))
    seen = []

    def bonus(next_obs):
        seen.append(next_obs.batch_size)
        return next_obs["state"][..., 0] - 100.0

    torch.manual_seed(0)
    plain = buffer.sample(50)
    torch.manual_seed(0)
    with_bonus = buffer.sample(50, bonus)
    assert seen == [torch.Size([50, n_step])]  # column 0: the sample's own transition
    torch.testing.assert_close(with_bonus["reward"], 2 * plain["reward"])
    for key in ("obs", "next_obs", "terminated", "discount"):
        assert (with_bonus[key] == plain[key]).all(), key
