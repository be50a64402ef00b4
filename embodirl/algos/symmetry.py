"""Symmetry augmentation and the mirror loss for on-policy minibatches (``algo.symmetry``).

Mittal et al. 2024, "Symmetry Considerations for Learning Task Symmetric Robot Policies", as rsl_rl's symmetry
extension (``rsl_rl/extensions/symmetry.py``) does it. A *mirror* is a function ``(obs, action) -> (obs, action)``
that the user names by its import path (``algo.symmetry.mirror``; the envs ship theirs beside them:
:func:`embodirl.envs.push_cube.symmetry.mirror`, :func:`embodirl.envs.cartpole_symmetry.mirror`). It must map a
state of the env and an action to the state and action whose next state is the mirror image of the original's, so
that a mirrored trajectory is a trajectory of the same env, with the same rewards; a reflection applied twice gives
back its input (:func:`check_mirror` tries both on random inputs before training).

* :func:`augment`: each minibatch ``[B]`` becomes ``[2B]``, the original samples then their mirror images. A
  mirrored sample keeps the original's advantage, return, value and log-prob: the mirrored behaviour policy (the
  collecting policy seen in the mirror) drew the mirrored action with exactly the original's probability (a
  reflection of the action space preserves densities), so the importance ratio stays correct without a symmetric
  policy.
* :func:`mirror_loss`: the mean squared difference between the policy's mean action on mirrored observations and
  the mirrored mean action on the originals (the latter a fixed target), over Box actions.

The mirror is code that the user names on the command line, like a ``_target_``; a config read from a file never
reaches it (evaluation builds no algorithm, and a resume composes the command line's config).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.algos.functional import weighted_mean
from embodirl.config.algos import SymmetryConfig
from embodirl.config.instantiate import import_callable
from embodirl.envs.base import BatchedEnv
from embodirl.envs.observations import observation_spec
from embodirl.errors import ConfigError
from embodirl.policies.base import Policy

__all__ = ["Mirror", "augment", "check_mirror", "load_mirror", "mirror_loss"]

#: ``(obs [B], action [B, ...]) -> (mirrored obs, mirrored action)``, same keys, shapes and dtypes.
Mirror = Callable[[TensorDict, Tensor], tuple[TensorDict, Tensor]]

KEY = "algo.symmetry.mirror"
FIX = (f"pass {KEY}=embodirl.envs.cartpole_symmetry.mirror (env=cartpole; env=push_cube with obs_mode=state: "
       "embodirl.envs.push_cube.symmetry.mirror; another env: the import path of its reflection, a function "
       "(obs, action) -> (obs, action))")


def load_mirror(cfg: SymmetryConfig, policy: Policy) -> Mirror | None:
    """The mirror that ``cfg`` names, or None when neither augmentation nor the mirror loss is on.

    Raises:
        ConfigError: An import path that does not import or is not callable, a recurrent policy, or a mirror loss
            without Box actions.
    """
    if cfg.mirror is None or not (cfg.augment or cfg.loss_coef > 0):
        return None
    if policy.is_recurrent:
        raise ConfigError("algo.symmetry.augment", cfg.augment, "false, and algo.symmetry.loss_coef 0, with a "
                          "recurrent policy (a mirrored sequence would need the mirrored recurrent state)",
                          "pass algo.symmetry.augment=false algo.symmetry.loss_coef=0, or a feedforward policy",
                          absolute=True)
    if cfg.loss_coef > 0 and not (policy.dist.action_dtype.is_floating_point and hasattr(policy, "action_params")):
        raise ConfigError("algo.symmetry.loss_coef", cfg.loss_coef, "0 with Discrete actions (the mirror loss "
                          "compares mean actions of a Box action space)",
                          "pass algo.symmetry.loss_coef=0 and keep algo.symmetry.augment=true", absolute=True)
    return import_callable(KEY, cfg.mirror, "the import path of a function (obs, action) -> (obs, action)", FIX)


def check_mirror(mirror: Mirror, path: str, env: BatchedEnv, action_dtype: torch.dtype, num_samples: int = 8) -> None:
    """Dry-run ``mirror`` (imported from ``path``) on random observations and actions of ``env``'s spaces: it must
    keep their keys, shapes and dtypes, and give back its input when applied twice.

    Raises:
        ConfigError: Naming ``algo.symmetry.mirror`` and what went wrong (an exception of the mirror's included).
    """
    device = torch.device(env.device)
    gen = torch.Generator().manual_seed(0)
    obs = TensorDict({}, batch_size=[num_samples], device=device)
    for key, (shape, dtype) in observation_spec(env.observation_space).items():
        value = (torch.randn(num_samples, *shape, generator=gen) if dtype.is_floating_point
                 else torch.randint(0, 2 if dtype == torch.bool else 256, (num_samples, *shape), generator=gen))
        obs.set(key, value.to(device=device, dtype=dtype))
    env.action_space.seed(0)
    action = torch.as_tensor(np.stack([env.action_space.sample() for _ in range(num_samples)]), device=device)
    action = action.to(action_dtype)
    try:
        once = mirror(obs, action)
        twice = mirror(*once)
    except Exception as exc:  # the user's function: one line naming it, not a traceback
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:240]
        raise ConfigError(KEY, path, f"a mirror of this env's observations and "
                          f"actions; on a sample of them it raised {reason}", FIX, absolute=True) from None
    problem = _mismatch(obs, action, once, "once") or _mismatch(obs, action, twice, "twice", values=True)
    if problem:
        raise ConfigError(KEY, path, f"a mirror (obs, action) -> (obs, action) "
                          f"that keeps keys, shapes and dtypes and applied twice gives back its input; {problem}",
                          FIX, absolute=True)


def _mismatch(obs: TensorDict, action: Tensor, out: tuple[TensorDict, Tensor], times: str,
              values: bool = False) -> str | None:
    """What differs between ``(obs, action)`` and ``out``, the mirror applied ``times`` (None when nothing)."""
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], TensorDict)):
        return f"applied {times} it returned {type(out).__name__}, not a (TensorDict, Tensor) pair"
    pairs = {f"obs[{key!r}]": (obs.get(key), out[0].get(key, None)) for key in obs.keys(True, True)}
    pairs["action"] = (action, out[1])
    for name, (want, got) in pairs.items():
        if not isinstance(got, Tensor) or got.shape != want.shape or got.dtype != want.dtype:
            found = f"{list(got.shape)} {got.dtype}" if isinstance(got, Tensor) else type(got).__name__
            return f"applied {times}, {name} became {found} (expected {list(want.shape)} {want.dtype})"
        if values and not torch.allclose(got.double(), want.double(), rtol=1e-5, atol=1e-6):
            return f"applied {times}, {name} is not its input"
    return None


def augment(batch: TensorDict, mirror: Mirror) -> TensorDict:
    """``[2B]``: the minibatch ``batch`` ``[B]`` then its mirror image, whose ``"obs"`` and ``"action"`` are
    mirrored and whose other entries (advantage, return, value, log-prob, weight) are the original's."""
    obs, action = mirror(batch.get("obs"), batch.get("action"))
    mirrored = batch.copy()  # a shallow copy: the other entries are the original's tensors
    mirrored.set("obs", obs)
    mirrored.set("action", action)
    return cast(TensorDict, torch.cat([batch, mirrored]))  # torch.cat of TensorDicts is a TensorDict


def mirror_loss(mean: Tensor, mirrored_obs_mean: Tensor, obs: TensorDict, weight: Tensor, mirror: Mirror) -> Tensor:
    """``weighted_mean(mean_d (mu(mirror(o)) - mirror(mu(o)))^2)``: how far the policy is from mirror symmetry.

    Args:
        mean: ``[B, D]`` the policy's mean actions on the observations ``obs`` ``[B]``; mirrored, they are the
            target (no gradient flows through it, as in rsl_rl).
        mirrored_obs_mean: ``[B, D]`` its mean actions on the mirrored observations (the gradient's path).
        obs: The original observations (passed to ``mirror`` with the actions).
        weight: ``[B]`` sample weights (0 for padding).
        mirror: The mirror map.
    """
    _, target = mirror(obs, mean.detach())
    return weighted_mean((mirrored_obs_mean - target).pow(2).mean(-1), weight)
