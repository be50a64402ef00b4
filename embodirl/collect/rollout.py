"""The one rollout schema: a pre-allocated TensorDict of batch size ``[N, T+1]``.

``N`` envs, ``T`` steps. Index ``t < T`` holds transition ``t``: the observation acted on, the action,
its log-prob, the critic's value, and what the env returned (reward and flags). Slot ``T`` holds the
bootstrap observation ``obs[:, T]`` and its value ``value[:, T]``; its transition keys are padding.
Every key is written by the collector, from what the env (``reset``/``step``) and the policy (``act``,
``value``) return:

| key | shape | dtype | meaning |
|---|---|---|---|
| ``obs`` | TensorDict [N, T+1] | per key | observation acted on; slot T: the bootstrap observation |
| ``action`` | [N, T+1, *action_shape] | float32 / int64 | action taken (``policy.act``); slot T padding |
| ``sample_log_prob`` | [N, T+1] | float32 | log-prob of ``action`` under the collecting policy |
| ``value`` | [N, T+1] | float32 | V(obs) (``policy.act``); ``value[:, T]`` is the bootstrap value (``policy.value``) |
| ``reward`` | [N, T+1] | float32 | reward of transition t |
| ``done`` | [N, T+1] | bool | ``terminated`` or ``truncated`` |
| ``terminated`` | [N, T+1] | bool | the episode reached a terminal state (no future value) |
| ``truncated`` | [N, T+1] | bool | cut by a time limit (the future is bootstrapped) |
| ``final_value`` | [N, T+1] | float32 | V(true final obs) where truncated and not terminated, else 0 |
| ``policy_state`` | TensorDict [N, T+1] | per key | recurrent policies only: the state the policy acted with |
| ``next_obs`` | TensorDict [N, T+1] | per key | ``CollectPlan.next_obs`` only: true next obs of transition t |

``obs`` holds one entry per observation key (a Box env's is ``"state"``; images stay uint8); ``policy_state`` is
zero where an episode starts. ``next_obs`` (off-policy algorithms ask for it) is the observation transition ``t``
led to: the episode's final observation where it ended (``obs[:, t+1]`` is then the next episode's first), so a
replay buffer can store transitions on their own; its slot T is padding. Actor-only policies write ``value = 0``
and ``final_value = 0``. The non-tensor entry ``num_steps_collected`` (int, set by the collector) is the number
of steps actually simulated: less than T when the collector stopped early because every env had finished an episode
(``CollectPlan.first_episode_only``); slots from there to T are padding with ``done = terminated = True``
and zero reward. Algorithms may add keys (``advantage``, ``returns``) but never change these.

A policy that emits action chunks (``policy.action_chunk = H > 1``) makes each slot a decision: ``action`` is the
chunk ``[N, T+1, H, *action_shape]``, of which the collector executed the first ``k = policy.chunk_execute``, one
env step each; ``reward`` is the plain sum of their rewards up to the step that ended the episode, if one did
(the flags and ``final_value`` are then that step's). The non-tensor entry ``num_env_steps`` is the number of env
steps each env simulated (``num_steps_collected * k``; without chunks the two are equal).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from embodirl.envs.observations import ObsSpec, allocate, key_name

__all__ = ["ROLLOUT_KEYS", "allocate_rollout", "non_finite_env_output", "transitions", "validate_rollout"]

# key -> (dtype, who writes it); shapes follow from the observation spec and the action shape.
ROLLOUT_KEYS: dict[str, tuple[torch.dtype | None, str]] = {
    "obs": (None, "the collector (from env.reset/env.step observations)"),
    "action": (None, "the collector (policy.act)"),
    "sample_log_prob": (torch.float32, "the collector (policy.act)"),
    "value": (torch.float32, "the collector (policy.act, policy.value)"),
    "reward": (torch.float32, "the collector (env.step)"),
    "done": (torch.bool, "the collector (env.step: terminated | truncated)"),
    "terminated": (torch.bool, "the collector (env.step)"),
    "truncated": (torch.bool, "the collector (env.step)"),
    "final_value": (torch.float32, "the collector (policy.value on the true final obs)"),
}


def allocate_rollout(
    num_envs: int,
    num_steps: int,
    obs_spec: ObsSpec,
    action_shape: tuple[int, ...],
    action_dtype: torch.dtype,
    device: torch.device | str,
    policy_state: TensorDict | None = None,
    next_obs: bool = False,
) -> TensorDict:
    """Allocate a zeroed rollout of batch size ``[num_envs, num_steps + 1]``.

    Args:
        num_envs: ``N``.
        num_steps: ``T``.
        obs_spec: ``{key: (shape, dtype)}`` of the observations (:func:`~embodirl.envs.observations.observation_spec`).
        action_shape: Per-step action shape.
        action_dtype: Action dtype.
        device: Device of every tensor.
        policy_state: A recurrent policy's initial state ``[N]``, to size ``policy_state``; None or empty: none.
        next_obs: Allocate ``next_obs`` (what a replay buffer stores; off-policy algorithms ask for it).
    """
    n, t1 = num_envs, num_steps + 1
    rollout = TensorDict({"obs": allocate(obs_spec, (n, t1), device)}, batch_size=[n, t1], device=device)
    for key, (dtype, _) in ROLLOUT_KEYS.items():
        if key != "obs":
            shape = action_shape if key == "action" else ()
            rollout.set(key, torch.zeros((n, t1, *shape), dtype=action_dtype if key == "action" else dtype,
                                         device=device))
    if policy_state is not None and not policy_state.is_empty():
        rollout.set("policy_state", torch.stack([policy_state] * t1, dim=1).zero_())
    if next_obs:
        rollout.set("next_obs", allocate(obs_spec, (n, t1), device))
    return rollout


def validate_rollout(
    rollout: TensorDict, obs_spec: ObsSpec | None = None, action_shape: tuple[int, ...] | None = None
) -> None:
    """Check keys, batch layout, shapes and dtypes; raise ValueError naming the key and its producer.

    Args:
        rollout: The rollout to check.
        obs_spec: Expected observation keys, shapes and dtypes (skipped when None).
        action_shape: Expected per-step action shape (skipped when None).
    """
    if rollout.batch_dims != 2:
        raise ValueError(
            f"rollout batch size must be [num_envs, T+1], got {list(rollout.batch_size)}; "
            "allocate it with embodirl.collect.rollout.allocate_rollout"
        )
    n, t1 = rollout.batch_size
    for key, (dtype, producer) in ROLLOUT_KEYS.items():
        if key not in rollout:
            raise ValueError(f"rollout is missing key '{key}' (written by {producer})")
        value = rollout.get(key)
        if key == "obs":
            _validate_obs(value, obs_spec, producer)
            if "next_obs" in rollout:  # optional (CollectPlan.next_obs): the same observation keys
                _validate_obs(rollout.get("next_obs"), obs_spec, "the collector (env.step final_obs)")
            continue
        event = action_shape if key == "action" else ()
        if event is not None and tuple(value.shape) != (n, t1, *event):
            raise ValueError(
                f"rollout['{key}'] has shape {list(value.shape)}, expected {[n, t1, *event]} (written by {producer})"
            )
        if dtype is not None and value.dtype != dtype:
            raise ValueError(f"rollout['{key}'] has dtype {value.dtype}, expected {dtype} (written by {producer})")


def _validate_obs(obs: object, spec: ObsSpec | None, producer: str) -> None:
    if not isinstance(obs, TensorDict):
        raise ValueError(f"rollout['obs'] must be a TensorDict of observation keys, got {type(obs).__name__} "
                         f"(written by {producer})")
    if spec is None:
        return
    n, t1 = obs.batch_size
    for key, (shape, dtype) in spec.items():
        if key not in obs.keys(include_nested=True, leaves_only=True):
            raise ValueError(f"rollout['obs'] is missing key '{key_name(key)}' (written by {producer})")
        value = obs.get(key)
        if tuple(value.shape) != (n, t1, *shape) or value.dtype != dtype:
            raise ValueError(f"rollout['obs', '{key_name(key)}'] has shape {list(value.shape)} and dtype "
                             f"{value.dtype}, expected {[n, t1, *shape]} and {dtype} (written by {producer})")


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


def non_finite_env_output(rollout: TensorDict) -> str | None:
    """What the env wrote that is NaN or infinite (``"reward"``, ``"observation 'state'"``), else None.

    Called after a non-finite loss (one host sync, only then): if the env's own output already was, the loss only
    followed it, and the env is what needs fixing, not the learning rate.
    """
    steps = rollout.batch_size[1] - 1  # slot T holds the bootstrap observation only
    if not bool(torch.isfinite(rollout["reward"][:, :steps]).all()):
        return "reward"
    for key, value in rollout["obs"].items(include_nested=True, leaves_only=True):
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            return f"observation {key_name(key if isinstance(key, tuple) else (key,))!r}"
    return None
