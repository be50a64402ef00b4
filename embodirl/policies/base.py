"""The policy contract: what every algorithm, the collector and the evaluator call on a policy (:class:`Policy`).

Observations are TensorDicts (:mod:`embodirl.envs.observations`; a Box env's tensor is the key ``"state"``).
Recurrent policies carry a state (a TensorDict, empty for feedforward ones) from step to step. The shipped
policies are :class:`~embodirl.policies.actor_only.ActorOnly`, :class:`~embodirl.policies.actor_critic.ActorCritic`
and :class:`~embodirl.policies.recurrent.ActorCriticRNN`; any class with these members works.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tensordict import TensorDict
from torch import Tensor
from torch.nn import Parameter

from embodirl.policies.distributions import ActionDistribution

if TYPE_CHECKING:
    from typing import Self  # Python 3.11+; annotations are never evaluated at run time here

__all__ = ["Policy"]


@runtime_checkable
class Policy(Protocol):
    """What embodirl calls on a policy. ``B`` is a batch of envs; recurrent sequences are ``[B, L]``.

    Attributes:
        has_critic: It learns a value (PPO's GAE); False for actor-only policies (GRPO).
        is_recurrent: It carries a state from step to step (:meth:`initial_state` is not empty).
        dist: The action distribution (its ``action_shape``/``action_dtype`` size the rollout).
    """

    has_critic: bool
    is_recurrent: bool
    dist: ActionDistribution

    def initial_state(self, batch_size: int) -> TensorDict:
        """The state at an episode's start, batch ``[batch_size]`` (an empty TensorDict when feedforward)."""

    def act(self, obs: TensorDict, state: TensorDict,
            deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor, TensorDict]:
        """Without gradients: ``(action, log_prob [B], value [B], next_state)`` for ``obs`` ``[B]``."""

    def mode(self, obs: TensorDict, state: TensorDict) -> tuple[Tensor, TensorDict]:
        """Without gradients: the deterministic action and the next state."""

    def value(self, obs: TensorDict, state: TensorDict) -> Tensor:
        """Without gradients: ``[B]`` values."""

    def evaluate(self, obs: TensorDict, action: Tensor, state: TensorDict | None = None,
                 reset: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """With gradients: ``(log_prob, entropy, value)`` of ``action``; ``[B]`` for a feedforward policy, ``[B, L]``
        for a recurrent one given sequences, their first ``state`` ``[B]`` and ``reset`` ``[B, L]`` (the state
        restarts before step l)."""

    def update_normalizer(self, obs: TensorDict) -> None:
        """Merge observations into the running statistics (no-op without normalisation)."""

    # The torch.nn.Module members embodirl calls (a policy is a module): the optimizer takes the parameters,
    # checkpoints save and load the state, GRPO freezes a copy as its reference policy.
    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """The trainable tensors (``torch.nn.Module.parameters``)."""

    def state_dict(self) -> dict[str, Any]:
        """The weights and buffers, by name (``torch.nn.Module.state_dict``)."""

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> Any:
        """Load what :meth:`state_dict` returned (``torch.nn.Module.load_state_dict``)."""

    def requires_grad_(self, requires_grad: bool = True) -> Self:
        """Switch gradients of every parameter on or off (``torch.nn.Module.requires_grad_``)."""

    def eval(self) -> Self:
        """Switch to evaluation mode (``torch.nn.Module.eval``)."""
