"""DrQ's random shift of the image observations of a batch sampled from a replay buffer (off-policy algorithms).

Kostrikov, Yarats and Fergus 2020, "Image Augmentation Is All You Need" (DrQ), section 3.1: each image is padded
by 4 pixels that repeat its border and cropped back to its size at a random offset of its own, so the picture
moves by up to 4 pixels in each direction. DrQ-v2 (Yarats et al. 2021) does the same shift with a bilinear
``grid_sample`` (sub-pixel offsets); the integer shift is kept here: it is exact on ``uint8`` frames (no
interpolation, no conversion before the encoder), and it is the one the encoders already use for on-policy
algorithms (:func:`~embodirl.policies.augmentation.random_shift`, ``policy.encoders.<key>.random_shift``).

:func:`shift_batch` draws one offset per sample and per observation (``obs`` and ``next_obs`` independently, as
DrQ's ``K = M = 1`` does); the critic and the actor of one gradient step read the same shifted ``obs``. Which keys
are images is decided from their shapes and dtypes (``uint8`` ``[H, W, C]``), which are fixed for a run: a compiled
update sees no data-dependent branch, and the offsets come from ``torch.randint`` on the batch's device (no Python
randomness). Vector keys, actions, rewards and flags are returned untouched.
"""

from __future__ import annotations

from tensordict import TensorDict
from torch import Tensor

from embodirl.policies.augmentation import random_shift
from embodirl.policies.encoders import is_image

__all__ = ["shift_batch", "shift_observation"]

#: The batch keys whose images are shifted: the observation a critic reads and the one its target reads.
OBSERVATION_KEYS = ("obs", "next_obs")


def shift_observation(obs: Tensor | TensorDict, pad: int) -> Tensor | TensorDict:
    """``obs`` ``[B, ...]`` (a tensor or a TensorDict of keys) with every image ``[B, H, W, C]`` ``uint8`` shifted by
    up to ``pad`` pixels (an offset of its own per sample, border repeated); other leaves are the same tensors."""
    if isinstance(obs, Tensor):
        return random_shift(obs, pad) if is_image(tuple(obs.shape[1:]), obs.dtype) else obs
    shifted = obs.copy()  # a shallow copy: the sampled batch's other leaves are shared, not cloned
    for key, value in obs.items(include_nested=True, leaves_only=True):
        if isinstance(value, Tensor) and is_image(tuple(value.shape[obs.batch_dims:]), value.dtype):
            shifted.set(key, random_shift(value, pad))
    return shifted


def shift_batch(batch: TensorDict, pad: int) -> TensorDict:
    """The sampled ``batch`` with the images of its ``obs`` and ``next_obs`` shifted (:func:`shift_observation`);
    ``pad = 0`` returns it as it is."""
    if pad == 0:
        return batch
    shifted = batch.copy()
    for key in OBSERVATION_KEYS:
        if key in batch.keys():  # noqa: SIM118 (a TensorDict answers `in` for keys only through keys())
            shifted.set(key, shift_observation(batch.get(key), pad))
    return shifted
