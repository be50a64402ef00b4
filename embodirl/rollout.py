"""The one rollout schema: a pre-allocated TensorDict of batch size ``[N, T+1]``.

``N`` envs, ``T`` steps. Index ``t < T`` holds transition ``t``: the observation acted on, the action,
its log-prob, the critic's value, and what the env returned (reward and flags). Slot ``T`` holds the
bootstrap observation ``obs[:, T]`` and its value ``value[:, T]``; its transition keys are padding.

| key | shape | dtype | written by | meaning |
|---|---|---|---|---|
| ``obs`` | [N, T+1, *obs_shape] | float32 | collector | observation acted on; slot T = bootstrap obs |
| ``action`` | [N, T+1, *action_shape] | float32 / int64 | policy | action taken; slot T padding |
| ``sample_log_prob`` | [N, T+1] | float32 | policy | log-prob of ``action`` under the collecting policy |
| ``value`` | [N, T+1] | float32 | policy | V(obs); ``value[:, T]`` is the bootstrap value |
| ``reward`` | [N, T+1] | float32 | env | reward of transition t |
| ``done`` | [N, T+1] | bool | env | ``terminated | truncated`` |
| ``terminated`` | [N, T+1] | bool | env | the episode reached a terminal state (no future value) |
| ``truncated`` | [N, T+1] | bool | env | cut by a time limit (the future is bootstrapped) |
| ``final_value`` | [N, T+1] | float32 | collector | V(true final obs) where truncated and not terminated, else 0 |

Actor-only policies write ``value = 0`` and ``final_value = 0``. The non-tensor entry
``num_steps_collected`` (int, set by the collector) is the number of steps actually simulated: less
than T when the collector stopped early because every env had finished an episode
(``CollectPlan.stop_when_all_done``); slots from there to T are padding with ``done = terminated = True``
and zero reward. Algorithms may add keys (``advantage``,
``return``) but never change these.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

__all__ = ["ROLLOUT_KEYS", "allocate_rollout", "transitions", "validate_rollout"]

# key -> (dtype, who writes it); shapes follow from obs_shape/action_shape.
ROLLOUT_KEYS: dict[str, tuple[torch.dtype | None, str]] = {
    "obs": (torch.float32, "collector (from env.reset/env.step observations)"),
    "action": (None, "policy.get_action"),
    "sample_log_prob": (torch.float32, "policy.get_action"),
    "value": (torch.float32, "policy.get_action / policy.get_value"),
    "reward": (torch.float32, "env.step"),
    "done": (torch.bool, "env.step (terminated | truncated)"),
    "terminated": (torch.bool, "env.step"),
    "truncated": (torch.bool, "env.step"),
    "final_value": (torch.float32, "collector (policy.get_value on the true final obs)"),
}


def allocate_rollout(
    num_envs: int,
    num_steps: int,
    obs_shape: tuple[int, ...],
    action_shape: tuple[int, ...],
    action_dtype: torch.dtype,
    device: torch.device | str,
) -> TensorDict:
    """Allocate a zeroed rollout of batch size ``[num_envs, num_steps + 1]``."""
    n, t1 = num_envs, num_steps + 1
    shapes = {"obs": obs_shape, "action": action_shape}
    tensors = {}
    for key, (dtype, _) in ROLLOUT_KEYS.items():
        dtype = action_dtype if key == "action" else dtype
        tensors[key] = torch.zeros((n, t1, *shapes.get(key, ())), dtype=dtype, device=device)
    return TensorDict(tensors, batch_size=[n, t1], device=device)


def validate_rollout(
    rollout: TensorDict, obs_shape: tuple[int, ...] | None = None, action_shape: tuple[int, ...] | None = None
) -> None:
    """Check keys, batch layout, shapes and dtypes; raise ValueError naming the key and its producer.

    Args:
        rollout: The rollout to check.
        obs_shape: Expected per-step observation shape (skipped when None).
        action_shape: Expected per-step action shape (skipped when None).
    """
    if rollout.batch_dims != 2:
        raise ValueError(
            f"rollout batch size must be [num_envs, T+1], got {list(rollout.batch_size)}; "
            "allocate it with embodirl.rollout.allocate_rollout"
        )
    n, t1 = rollout.batch_size
    expected_event = {"obs": obs_shape, "action": action_shape}
    for key, (dtype, producer) in ROLLOUT_KEYS.items():
        if key not in rollout.keys():
            raise ValueError(f"rollout is missing key '{key}' (written by {producer})")
        value = rollout.get(key)
        event = expected_event.get(key, ())
        if event is not None and tuple(value.shape) != (n, t1, *event):
            raise ValueError(
                f"rollout['{key}'] has shape {list(value.shape)}, expected {[n, t1, *event]} "
                f"(written by {producer})"
            )
        if dtype is not None and value.dtype != dtype:
            raise ValueError(f"rollout['{key}'] has dtype {value.dtype}, expected {dtype} (written by {producer})")


def transitions(rollout: TensorDict, **extra: torch.Tensor) -> TensorDict:
    """The transition view: drop the padding slot T and flatten to ``[N * T]``.

    Args:
        rollout: A ``[N, T+1]`` rollout.
        **extra: Additional ``[N, T]`` tensors (e.g. ``advantage``) to include.
    """
    view = rollout[:, :-1]
    for key, value in extra.items():
        view.set(key, value)
    return view.reshape(-1)
