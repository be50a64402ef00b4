"""A policy's deterministic actor as a function of plain tensors, written as ONNX or TorchScript for a robot.

:class:`DeterministicActor` wraps any policy (the :class:`~embodirl.policies.base.Policy` contract): it takes one
tensor per observation key the actor reads (in :func:`~embodirl.envs.observations.observation_spec` order; a
privileged key only the critic reads is no input: a robot may not have it) and, for a recurrent policy, one tensor
per state entry the actor updates; it returns the action and the new state. Inside it is what the env would
otherwise need from embodirl: the observation normaliser's running statistics (the policy's own ``encode``), the
distribution's deterministic action (``policy.mode``: the Gaussian's mean, the Beta's mean, the Categorical's
argmax) and the clip to the ``Box``'s bounds that every embodirl env applies to an action.

An observation that holds its key's last ``k`` values (``env.obs_history``, ``env.frame_stack``) is one input of
the width the policy reads, ``[k D]`` (``[H, W, k C]``): the driver keeps the history, as Isaac Lab's and mjlab's
exported policies read their flattened history terms, so the file stays a function of its inputs and the env
it was trained in (or any env wrapped alike) feeds it directly. :func:`history_inputs` says how, for the manifest.

A policy that emits action chunks (``policy.action_chunk = H``) returns the chunk, ``[batch, H, *action_shape]``:
the driver executes its first ``chunk_execute`` actions, one per control period, then calls again
(:attr:`DeterministicActor.action_chunk` and :attr:`DeterministicActor.chunk_execute`, in the manifest).

A state entry that ``mode`` passes through unchanged (the critic's memory of
:class:`~embodirl.policies.recurrent.ActorCriticRNN`, which the actor never reads) is no input: it is the
policy's initial state, held inside. Every tensor has a leading batch dimension of any size.

The ONNX file is written by ``torch.onnx.export(dynamo=True)``, torch's default and maintained exporter (it needs
``onnxscript`` besides ``onnx``): the TorchScript-based one (``dynamo=False``) works as well but warns that it will
be removed. TorchScript is written by ``torch.jit.trace``. Both give one file, weights inside, whose every tensor
has a dynamic batch axis.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor, nn

from embodirl.envs.observations import ObsKey, key_name, observation_spec

__all__ = ["FORMATS", "HISTORY_FEED", "DeterministicActor", "ExportFormat", "TensorSpec", "export_onnx",
           "export_torchscript", "history_inputs"]


ExportFormat = Literal["onnx", "torchscript"]
FORMATS: tuple[ExportFormat, ...] = ("onnx", "torchscript")


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of the exported function: its name, per-sample shape and dtype (the batch is first)."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    def as_json(self) -> dict[str, Any]:
        """``{"name", "shape", "dtype"}`` with the dtype as numpy names it (``float32``, ``uint8``, ``int64``)."""
        return {"name": self.name, "shape": list(self.shape), "dtype": str(self.dtype).removeprefix("torch.")}


def _random_state(template: TensorDict) -> TensorDict:
    generator = torch.Generator().manual_seed(0)
    state = template.clone()
    for key in state.keys(include_nested=True, leaves_only=True):
        state.set(key, torch.randn(state.get(key).shape, generator=generator).to(state.get(key).dtype))
    return state


def _updated_state_keys(policy: Any, obs: TensorDict, template: TensorDict) -> list[tuple[str, ...]]:
    """The state entries ``policy.mode`` changes, found by one step from a random state."""
    state = _random_state(template)
    _, next_state = policy.mode(obs, state.clone())
    keys = [tuple(k) if isinstance(k, tuple) else (k,) for k in state.keys(include_nested=True, leaves_only=True)]
    return [k for k in keys if not torch.equal(next_state.get(k), state.get(k))]


class DeterministicActor(nn.Module):
    """``(*obs, *state) -> (action, *new_state)``: a policy's deterministic action, clipped to the action space.

    Args:
        policy: A trained policy (in eval mode; it is not copied).
        observation_space: The env's single-env observation space (Box or Dict of Boxes).
        action_space: The env's single-env action space (Discrete or 1-D Box).
        action_start: For a ``Discrete`` space, the first action of the env the policy was trained on
            (gymnasium's ``Discrete(n, start=k)``; embodirl's adapters act with ``0 .. n-1`` and add ``k``): added
            inside, so the output is the env's own action.
    """

    low: Tensor
    high: Tensor

    def __init__(self, policy: Any, observation_space: gym.Space, action_space: gym.Space,
                 action_start: int = 0) -> None:
        super().__init__()
        self.action_start = int(action_start) if isinstance(action_space, gym.spaces.Discrete) else 0
        self.policy = policy
        spec = observation_spec(observation_space)
        read = getattr(policy, "actor_keys", None)  # the shipped policies' actor keys; None: every key
        self.obs_keys: list[ObsKey] = [k for k in spec if read is None or key_name(k) in read]
        self.inputs = [TensorSpec(f"obs.{key_name(k)}", *spec[k]) for k in self.obs_keys]
        # Keys the actor never reads (a privileged critic's) are zeros inside, never read.
        self.unread = {k: torch.zeros(1, *shape, dtype=dtype) for k, (shape, dtype) in spec.items()
                       if k not in self.obs_keys}
        example = TensorDict({k: torch.zeros(1, *shape, dtype=dtype) for k, (shape, dtype) in spec.items()},
                             batch_size=[1])
        template = policy.initial_state(1).cpu()
        self.state_keys = _updated_state_keys(policy, example, template) if policy.is_recurrent else []
        self.state = [TensorSpec("state." + ".".join(k), tuple(template.get(k).shape[1:]), template.get(k).dtype)
                      for k in self.state_keys]
        self.initial = template  # entries that are no input (unchanged by mode) keep their initial value
        self.clip = isinstance(action_space, gym.spaces.Box) and bool(
            np.isfinite(action_space.low).any() or np.isfinite(action_space.high).any())
        if isinstance(action_space, gym.spaces.Box):
            low, high = (torch.as_tensor(b, dtype=torch.float32) for b in (action_space.low, action_space.high))
            self.register_buffer("low", low, persistent=False)
            self.register_buffer("high", high, persistent=False)
            self.action = TensorSpec("action", tuple(policy.dist.action_shape), torch.float32)
        else:
            self.action = TensorSpec("action", tuple(policy.dist.action_shape), torch.int64)
        # An action chunk: H actions per call, of which the driver executes the first k before calling again.
        self.action_chunk = int(getattr(policy.dist, "action_chunk", 1))
        self.chunk_execute = int(getattr(policy.dist, "chunk_execute", 1))
        self.outputs = [self.action, *(TensorSpec(f"next_{s.name}", s.shape, s.dtype) for s in self.state)]
        self.eval()  # an inference function (the policy is already in eval mode; this says so to the exporters)

    def forward(self, *tensors: Tensor) -> tuple[Tensor, ...]:
        """``tensors``: the observations in :attr:`inputs` order, then the state in :attr:`state` order."""
        num_obs = len(self.obs_keys)
        batch = tensors[0].shape[0]
        obs = TensorDict({**{k: v.expand(batch, *v.shape[1:]) for k, v in self.unread.items()},
                          **dict(zip(self.obs_keys, tensors[:num_obs], strict=True))}, batch_size=[batch])
        # A batch of the initial state (the inputs replace what mode updates). Under torch.jit.trace, batch is a
        # traced size, which apply() passes to Tensor.expand and TensorDict.expand would refuse.
        state = self.initial.apply(lambda t: t.expand(batch, *t.shape[1:]), batch_size=[batch])
        for key, value in zip(self.state_keys, tensors[num_obs:], strict=True):
            state.set(key, value)
        action, next_state = self.policy.mode(obs, state)
        if self.clip:
            action = torch.minimum(torch.maximum(action, self.low), self.high)
        if self.action_start:
            action = action + self.action_start
        return (action, *(next_state.get(key) for key in self.state_keys))

    def example_inputs(self, batch_size: int = 2) -> tuple[Tensor, ...]:
        """Zero inputs of ``batch_size`` samples (what export traces with)."""
        return tuple(torch.zeros(batch_size, *s.shape, dtype=s.dtype) for s in (*self.inputs, *self.state))


#: How a driver feeds an input that holds a history (the manifest's ``history_feed``).
HISTORY_FEED = ("each input in history holds the last `length` observations of its key, each of step_shape, "
                "concatenated along the last axis, oldest first: keep them in the driver, drop the oldest and "
                "append the newest at every step, and start an episode with its first observation `length` times")


def history_inputs(actor: DeterministicActor, lengths: Mapping[ObsKey, int]) -> list[dict[str, Any]]:
    """``[{"name", "length", "step_shape"}]`` of the actor's inputs whose key holds its last ``length``
    observations (``lengths``: :func:`~embodirl.envs.frame_stack.history_lengths` of the env)."""
    return [{"name": spec.name, "length": lengths[key],
             "step_shape": [*spec.shape[:-1], spec.shape[-1] // lengths[key]]}
            for key, spec in zip(actor.obs_keys, actor.inputs, strict=True) if key in lengths]


def export_torchscript(actor: DeterministicActor, path: Path) -> None:
    """Trace ``actor`` (its ops do not depend on the batch size) and save it for ``torch.jit.load``."""
    with torch.no_grad(), warnings.catch_warnings():
        # TensorDict compares the batch size while the trace runs; the trace holds no such Python branch.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(actor, actor.example_inputs(), check_trace=False)
    traced.save(str(path))


def export_onnx(actor: DeterministicActor, path: Path) -> None:
    """Write ``actor`` as one ONNX file (weights inside) whose every input and output has the batch axis first.

    Raises:
        ModuleNotFoundError: ``onnx`` or ``onnxscript`` is not installed (``pip install 'embodirl[export]'``).
    """
    import onnx
    import onnxscript  # noqa: F401  (the exporter's dependency: fail here, by name, before tracing)

    names = [s.name for s in (*actor.inputs, *actor.state)]
    batch = torch.export.Dim("batch")
    with torch.no_grad(), _quiet_exporter():
        torch.onnx.export(actor, actor.example_inputs(), str(path), input_names=names,
                          output_names=[s.name for s in actor.outputs],
                          dynamic_shapes={"tensors": tuple({0: batch} for _ in names)}, dynamo=True,
                          external_data=False, verbose=False)
    onnx.checker.check_model(onnx.load(str(path)))


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """The exporter's progress lines (its optimiser's passes, torchvision ops it skips) and torch's internal
    deprecation notices say nothing to a user whose export worked: errors still raise."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "onnxscript", "onnx_ir")]
    levels = [logger.level for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
