"""DrQ's random shift of sampled batches: the shifted pixels by hand (the border repeats), an offset per sample and
per observation, vector keys and the dtype untouched, and the off-policy update feeding its gradient steps with it."""

import pytest
import torch
from tensordict import TensorDict

from embodirl.algos import off_policy
from embodirl.algos.augment import shift_batch, shift_observation

IMAGE = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]], dtype=torch.uint8)  # one channel, 3x3

# The image moved by one pixel or none in each direction, the border repeated, written out by hand:
# ROWS[dr] are the rows read for a shift of dr rows, then COLS[dc] picks the columns of each row.
ROWS = {-1: ["123", "123", "456"], 0: ["123", "456", "789"], 1: ["456", "789", "789"]}
COLS = {-1: lambda r: r[0] + r[0] + r[1], 0: lambda r: r, 1: lambda r: r[1] + r[2] + r[2]}
SHIFTED = {(dr, dc): tuple(COLS[dc](row) for row in ROWS[dr]) for dr in ROWS for dc in COLS}


def as_rows(image):
    """A ``[3, 3, 1]`` image as its rows of digits, as SHIFTED writes them."""
    return tuple("".join(str(int(v)) for v in row) for row in image[..., 0])


def images(batch_size):
    return IMAGE.view(1, 3, 3, 1).expand(batch_size, 3, 3, 1).clone()


def test_each_shifted_image_is_the_image_moved_by_at_most_pad_pixels_with_its_border_repeated():
    assert SHIFTED[(1, 1)] == ("566", "899", "899")  # one example in full: down-right, the last row and column twice
    torch.manual_seed(0)
    out = shift_observation(images(512), pad=1)
    seen = {as_rows(image) for image in out}
    # every sample is one of the nine shifts, and 512 independent draws give all nine
    assert seen == set(SHIFTED.values())
    assert out.dtype == torch.uint8 and out.shape == (512, 3, 3, 1)


def test_offsets_are_drawn_per_sample_and_obs_and_next_obs_apart():
    torch.manual_seed(1)
    obs = TensorDict({"rgb": images(256), "state": torch.randn(256, 5)}, [256])
    batch = TensorDict({"obs": obs, "next_obs": obs.clone(), "action": torch.randn(256, 2),
                        "reward": torch.randn(256)}, [256])
    out = shift_batch(batch, pad=1)
    now, after = out["obs", "rgb"], out["next_obs", "rgb"]
    assert len({as_rows(image) for image in now}) == 9  # samples of one batch differ
    differs = (now != after).flatten(1).any(1)
    assert 0.7 < differs.float().mean() < 0.99  # independent draws agree 1 time in 9
    for key in ("action", "reward", ("obs", "state"), ("next_obs", "state")):
        assert out[key] is batch[key]  # vector keys and the rest untouched (the same tensors)
    assert torch.equal(batch["obs", "rgb"], images(256))  # the sampled batch itself is not modified


def test_float_and_vector_observations_and_pad_zero_pass_through():
    vector = torch.randn(4, 7)
    floats = torch.rand(4, 8, 8, 3)  # not uint8: not an image to shift
    assert shift_observation(vector, 4) is vector and shift_observation(floats, 4) is floats
    batch = TensorDict({"obs": images(4)}, [4])
    assert shift_batch(batch, 0) is batch
    torch.manual_seed(0)
    shifted = shift_batch(batch, 1)["obs"]  # a plain image observation (not a dict) is shifted too
    assert shifted.dtype == torch.uint8 and not torch.equal(shifted, images(4))


@pytest.mark.parametrize("pad", [0, 4])
def test_the_off_policy_update_hands_its_gradient_steps_the_shifted_batch(monkeypatch, pad):
    from tests.algos.test_pixels_off_policy import pixel_algo

    algo, collector = pixel_algo("sac", f"algo.random_shift={pad}")
    calls, seen = [], []
    real = off_policy.shift_batch

    def spy(batch, shift):
        calls.append(shift)
        out = real(batch, shift)
        seen.append(out)
        return out

    monkeypatch.setattr(off_policy, "shift_batch", spy)
    monkeypatch.setattr(algo, "train_step", lambda batch: seen.append(batch) or {})
    algo.update(collector.collect())
    assert calls and set(calls) == {pad}
    assert all(seen[i + 1] is seen[i] for i in range(0, len(seen), 2))  # train_step got shift_batch's output
