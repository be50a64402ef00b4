"""Start from a pretrained policy and freeze parts of it: ``policy.init_from`` and ``policy.freeze``.

``init_from`` names an embodirl checkpoint (its ``policy`` weights are taken) or a file holding a plain
``state_dict`` (tensors by parameter name), loaded with ``weights_only=True`` like every file embodirl
reads. The weights must fit the policy the config builds (the message lists missing and unexpected
names and shapes). ``freeze`` holds ``fnmatch`` patterns over parameter names (``encoders.*``,
``actor.0.*``); matching parameters stop requiring gradients, so the optimizer never sees them. With
GRPO and ``algo.kl_coef > 0`` the frozen reference policy is the loaded one: fine-tuning is penalised for
drifting from the pretrained behaviour (the VLA fine-tuning recipe of EmbodiChain's docs).
"""

from __future__ import annotations

import fnmatch
import pickle
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from embodirl.errors import CheckpointError, ConfigError

__all__ = ["freeze", "load_pretrained"]


def load_pretrained(policy: nn.Module, path: str | Path) -> None:
    """Load ``path``'s policy weights into ``policy`` (on its device).

    Raises:
        CheckpointError: Missing, unreadable or hostile file, or weights that do not fit.
    """
    from embodirl.checkpoint import FORMAT, check_finite

    key = f"policy.init_from={str(path)!r}"
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{key} does not exist (or is not a file). Fix: pass an embodirl checkpoint "
                              "(<run_dir>/checkpoints/last.pt) or a .pt file holding a state_dict")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as exc:
        raise CheckpointError(f"{key} cannot be read safely ({type(exc).__name__}): it is corrupt or holds Python "
                              "objects beyond tensors. Fix: save a plain state_dict with torch.save") from None
    state = data.get("policy") if isinstance(data, dict) and data.get("format") == FORMAT else data
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{key} holds neither an embodirl checkpoint nor a state_dict of tensors. Fix: save "
                              "one with torch.save(policy.state_dict(), path)")
    check_finite(state, key)
    own = policy.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    wrong = sorted(name for name in set(own) & set(state) if own[name].shape != state[name].shape)
    if missing or unexpected or wrong:
        details = "; ".join(part for part in (
            f"missing {missing[:6]}{' ...' if len(missing) > 6 else ''}" if missing else "",
            f"unexpected {unexpected[:6]}{' ...' if len(unexpected) > 6 else ''}" if unexpected else "",
            "shapes differ for " + ", ".join(f"{n} {list(state[n].shape)} vs {list(own[n].shape)}" for n in wrong[:4])
            if wrong else "") if part)
        raise CheckpointError(f"{key} does not fit this policy ({details}). Fix: build the same policy, env "
                              "observation and action spaces the weights were trained with")
    policy.load_state_dict(state)


def freeze(policy: nn.Module, patterns: Sequence[str]) -> list[str]:
    """Stop the gradients of parameters matching any pattern; return their names.

    Raises:
        ConfigError: A pattern that matches no parameter (the message lists the parameters).
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
    for name, param in policy.named_parameters():
        if name in frozen:
            param.requires_grad_(False)
    return sorted(set(frozen))
