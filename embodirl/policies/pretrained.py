"""Start from a pretrained policy and freeze parts of it: ``policy.init_from`` and ``policy.freeze``.

``init_from`` names an embodirl checkpoint (its ``policy`` weights are taken) or a file holding a plain
``state_dict`` (tensors by parameter name), loaded with ``weights_only=True`` like every file embodirl
reads. Weights are matched by name, so a policy of another shape can start from them (pretrain with PPO's
actor-critic, fine-tune with GRPO's actor-only policy, or the reverse):

* the **actor** (what the actions are computed from: the encoders and observation statistics of the actor's
  keys, the actor network and the distribution's parameters, :meth:`Policy.actor_prefixes`) must fit
  exactly, or the run is refused in one line naming the first parameter that differs, its shapes and the fix;
* the **rest** (the critic, and encoders of keys only the critic reads) is loaded when all of it fits, and
  otherwise starts fresh;
* tensors in the file that this policy has no place for (a PPO critic, for an actor-only policy) are skipped.

What was skipped or left fresh is logged in one line. ``freeze`` holds ``fnmatch`` patterns over parameter
names (``encoders.*``, ``actor.0.*``); matching parameters stop requiring gradients, so the optimizer never
sees them. With GRPO and ``algo.kl_coef > 0`` the frozen reference policy is the loaded one: fine-tuning is
penalised for drifting from the pretrained behaviour (the VLA fine-tuning recipe of EmbodiChain's docs).
"""

from __future__ import annotations

import fnmatch
import pickle
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from embodirl.errors import CheckpointError, ConfigError

__all__ = ["freeze", "load_pretrained"]


def _read(path: Path, key: str) -> tuple[dict[str, torch.Tensor], Mapping[str, Any], Mapping[str, Any]]:
    """``(state_dict, the checkpoint's policy config or {}, its env config or {})`` of ``path``; a
    :class:`CheckpointError` otherwise."""
    from embodirl.runtime.checkpoint import FORMAT, check_finite

    if not path.is_file():
        raise CheckpointError(f"{key} does not exist (or is not a file). Fix: pass an embodirl checkpoint "
                              "(<run_dir>/checkpoints/last.pt) or a .pt file holding a state_dict")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as exc:
        raise CheckpointError(f"{key} cannot be read safely ({type(exc).__name__}): it is corrupt or holds Python "
                              "objects beyond tensors. Fix: save a plain state_dict with torch.save") from None
    checkpoint = isinstance(data, dict) and data.get("format") == FORMAT
    state = data.get("policy") if checkpoint else data
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{key} holds neither an embodirl checkpoint nor a state_dict of tensors. Fix: save "
                              "one with torch.save(policy.state_dict(), path)")
    check_finite(state, key)
    config = data.get("config") if checkpoint else None
    policy_cfg, env_cfg = (config.get(node) if isinstance(config, dict) else None for node in ("policy", "env"))
    return state, policy_cfg if isinstance(policy_cfg, dict) else {}, env_cfg if isinstance(env_cfg, dict) else {}


def _grouped(names: Iterable[str]) -> str:
    """Names summarised by module: ``critic.* (6), encoders.priv.* (2)``."""
    counts: dict[str, int] = {}
    for name in sorted(names):
        parts = name.split(".")
        depth = 2 if parts[0] in ("encoders", "normalizers") and len(parts) > 2 else 1
        prefix = ".".join(parts[:depth]) + (".*" if len(parts) > depth else "")
        counts[prefix] = counts.get(prefix, 0) + 1
    return ", ".join(f"{prefix} ({n})" if n > 1 else prefix for prefix, n in counts.items())


def _actor_fix(name: str, policy_cfg: Mapping[str, Any], env_cfg: Mapping[str, Any]) -> str:
    """How to build an actor that fits the file, for the first mismatching parameter ``name``."""
    if name.startswith("normalizers."):
        return ("pass policy.normalize_obs=" + ("false" if policy_cfg.get("normalize_obs") is False else "true")
                + " as the weights were trained (the observation statistics belong to the actor)")
    trained = ", ".join(f"policy.{k}={_value(policy_cfg[k])}" for k in ("hidden_sizes", "activation", "encoders",
                                                                          "actor_keys", "core", "core_size")
                        if policy_cfg.get(k) is not None and policy_cfg.get(k) != {})
    if trained:
        # The env keys that widen an observation key (its history) change the actor's input as the env does
        history = " and ".join(f"env.{k}={_value(env_cfg.get(k, 1))}" for k in ("obs_history", "frame_stack"))
        return f"build the actor the file was trained with ({trained}), on the same env" + (
            f" with {history}" if env_cfg else "")
    return "build the actor the weights were trained with (same policy.hidden_sizes, encoders and env spaces)"


def _distribution_fix(policy: nn.Module, policy_cfg: Mapping[str, Any]) -> str | None:
    """The fix when the file's actor was trained for another action distribution (its output layer then has
    another size whatever the layers): a PPO actor-critic's Gaussian for SAC's TanhGaussian, say; else None."""
    if not policy_cfg:  # a plain state_dict: nothing says how it was trained
        return None
    node = policy_cfg.get("distribution")
    trained = str(node.get("_target_", "")).rsplit(".", 1)[-1] if isinstance(node, Mapping) else None
    own = type(getattr(policy, "dist", None)).__name__
    if trained == own or (trained is None and own not in _NEVER_DEFAULT):
        return None
    return (f"the file's actor was trained for another action distribution ({trained or 'its policy default'}; "
            f"this policy's is {own}): start from a checkpoint of a run with this run's algo and policy, or drop "
            "policy.init_from")


# Distributions that a policy only has when its config names them (an algorithm's own actor: sac_actor, td3_actor)
_NEVER_DEFAULT = ("TanhGaussian", "DeterministicTanh")


def _value(value: Any) -> str:
    return str(value).replace(" ", "").replace("'", "") if isinstance(value, list | dict) else str(value)


def _actor_mismatch(own: Mapping[str, torch.Tensor], state: Mapping[str, torch.Tensor],
                    is_actor: Any) -> tuple[str, str] | None:
    """``(name, what differs)`` of the first actor tensor that does not fit, else None."""
    for name in sorted(n for n in own if is_actor(n)):
        if name not in state:
            return name, f"{name} (shape {list(own[name].shape)}) is missing from the file"
        if own[name].shape != state[name].shape:
            return name, f"{name} is {list(state[name].shape)} in the file and {list(own[name].shape)} here"
    extra = sorted(n for n in state if is_actor(n) and n not in own)
    if extra:
        return extra[0], f"{extra[0]} (shape {list(state[extra[0]].shape)}) in the file has no place in this actor"
    return None


def load_pretrained(policy: nn.Module, path: str | Path) -> str:
    """Load ``path``'s policy weights into ``policy`` (on its device), matching them by name.

    Returns:
        One line saying what was loaded, what was skipped from the file and what started fresh.

    Raises:
        CheckpointError: Missing, unreadable or hostile file, or an actor that does not fit.
    """
    key = f"policy.init_from={str(path)!r}"
    state, policy_cfg, env_cfg = _read(Path(path), key)
    own = policy.state_dict()
    actor_prefixes: Any = getattr(policy, "actor_prefixes", None)
    prefixes = tuple(actor_prefixes()) if callable(actor_prefixes) else ("",)

    def is_actor(name: str) -> bool:
        return name.startswith(prefixes)

    mismatch = _actor_mismatch(own, state, is_actor)
    if mismatch is not None:
        name, what = mismatch
        fix = _distribution_fix(policy, policy_cfg) or _actor_fix(name, policy_cfg, env_cfg)
        raise CheckpointError(f"{key} does not fit this policy's actor: {what}. Fix: {fix}")
    rest = [n for n in own if not is_actor(n)]
    rest_fits = all(n in state and state[n].shape == own[n].shape for n in rest)
    loading = {n: state[n] for n in own if is_actor(n) or rest_fits}
    policy.load_state_dict({**own, **loading})
    skipped = sorted(set(state) - set(own))
    parts = [f"{key}: loaded {len(loading)} of {len(own)} tensors"]
    if skipped:
        parts.append(f"skipped from the file (no place in this policy): {_grouped(skipped)}")
    if rest and not rest_fits:
        parts.append(f"started fresh (absent or of another shape in the file): {_grouped(rest)}")
    return "; ".join(parts)


def freeze(policy: nn.Module, patterns: Sequence[str]) -> list[str]:
    """Stop the gradients of parameters matching any pattern; return their names.

    Raises:
        ConfigError: A pattern that matches no parameter (the message lists the parameters), or patterns that
            match every parameter.
    """
    names = [name for name, _ in policy.named_parameters()]
    frozen = []
    for pattern in patterns:
        hits = [name for name in names if fnmatch.fnmatchcase(name, pattern)]
        if not hits:
            listed = ", ".join(names[:12]) + (" ..." if len(names) > 12 else "")
            raise ConfigError("policy.freeze", list(patterns), f"fnmatch patterns over parameter names ({pattern!r} "
                              f"matches none of: {listed})", "pass e.g. policy.freeze=['encoders.*','actor.0.*']",
                              absolute=True)
        frozen += hits
    if names and set(frozen) == set(names):
        raise ConfigError("policy.freeze", list(patterns), "patterns that leave some parameter to train (these match "
                          "every parameter: nothing would learn)", "freeze a part, e.g. policy.freeze=['encoders.*'], "
                          "or evaluate the policy with embodirl-eval", absolute=True)
    for name, param in policy.named_parameters():
        if name in frozen:
            param.requires_grad_(False)
    return sorted(set(frozen))
