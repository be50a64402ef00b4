"""Runs a policy in a batched env and fills the pre-allocated ``[N, T+1]`` rollout."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
from tensordict import TensorCollection, TensorDict
from torch import Tensor

from embodirl.accel.compile import Acceleration
from embodirl.accel.loop import EAGER, Carry, StepLoop, Values
from embodirl.collect.episode_stats import EpisodeStats
from embodirl.collect.rollout import allocate_rollout
from embodirl.envs.base import BatchedEnv, StepResult, env_mode
from embodirl.envs.observations import ObsKey, allocate, as_tensordict, observation_spec
from embodirl.policies.base import Policy
from embodirl.policies.distributions import Chunked

__all__ = ["CollectPlan", "Collector", "chunk_step", "complete_fraction", "env_step"]

_CHECK_EVERY = 8  # steps between host-side "has every env finished an episode?" checks
_TRANSITION = (  # the keys padded after an early stop
    "action", "sample_log_prob", "value", "reward", "terminated", "truncated", "done", "final_value")


@dataclass(frozen=True)
class CollectPlan:
    """How the collector fills rollouts for an algorithm.

    Attributes:
        num_steps: Rollout length ``T``.
        reset_every_rollout: Reset every env before each rollout (episodes start at t = 0).
        group_size: With ``reset_every_rollout``, envs in consecutive groups of this size start from
            one shared initial state (1 = independent).
        first_episode_only: Only each env's first episode of the rollout counts: stop stepping once every env
            has finished one (the rest would be masked out); later slots are padding with ``done = True``.
        restart_finished: With ``first_episode_only``, an env whose episode ends starts over from the state the
            rollout's reset gave it (:meth:`BatchedEnv.restart`: its group's shared start), so each env runs further
            attempts at its group's situation while the others finish their first (the loop stops as without
            restarts). Padding is then not ended: it continues the unfinished episodes, which no mask keeps.
        min_valid_fraction: With ``restart_finished``, once every env has finished an episode, go on until this
            share of the simulated steps lies in complete episodes (:func:`complete_fraction`); None: stop then.
        next_obs: Record each transition's true next observation in the rollout (``next_obs``: the episode's final
            observation where it ended, not the next episode's first), as a replay buffer stores transitions.
    """

    num_steps: int
    reset_every_rollout: bool = False
    group_size: int = 1
    first_episode_only: bool = False
    restart_finished: bool = False
    min_valid_fraction: float | None = None
    next_obs: bool = False


def complete_fraction(done: Tensor) -> Tensor:
    """The share of the steps of ``done`` ``[N, t]`` that lie in episodes ended within it: per env, the steps up
    to and including its last end, over ``N * t``."""
    through = torch.arange(1, done.shape[1] + 1, device=done.device)
    return (done * through).amax(1).sum() / done.numel()


def env_step(env: BatchedEnv, action: Tensor, next_state: TensorDict,
             recurrent: bool) -> tuple[StepResult, Tensor, Values]:
    """Step ``env``: what it returned, where an episode ended (``done``), and the next step's carry (the observation
    to act on, and the policy's state, restarted where an episode ended). The collector's and the evaluator's
    steps share it."""
    out = env.step(action)
    done = out.terminated | out.truncated
    if recurrent:
        keep = ~done
        next_state = cast(TensorDict, next_state.apply(lambda leaf: leaf * keep.view(-1, *[1] * (leaf.dim() - 1))))
    return out, done, {"obs": out.obs, "state": next_state}


def _select(mask: Tensor, a: TensorDict, b: TensorDict) -> TensorDict:
    """``a`` where ``mask`` ``[N]``, else ``b`` (leaf by leaf)."""
    return cast(TensorDict, a.apply(lambda x, y: torch.where(mask.view(-1, *[1] * (x.dim() - 1)), x, y), b))


def chunk_step(env: BatchedEnv, chunk: Tensor, execute: int,
               stats: EpisodeStats) -> tuple[StepResult, Tensor, dict[str, Tensor]]:
    """Execute the first ``execute`` actions of ``chunk`` ``[N, H, ...]``, one env step each: one decision.

    The decision's reward is the plain sum of the rewards of its steps, up to and including the step that ends the
    episode (an episode ending mid-chunk ends the decision there: its flags and true final observation are that
    step's). Batched envs step together and auto-reset, so an env whose episode ended runs the rest of the chunk in
    its next episode: those steps belong to that episode's statistics, not to the decision.

    Returns:
        ``(out, done, steps)``: the decision as one :class:`StepResult` (``obs`` to act on next, summed ``reward``,
        ``terminated``/``truncated``/``final_obs`` of the episode it acted in, the last step's ``info``); where its
        episode ended; and what :class:`EpisodeStats` needs of each env step (``reward``, ``done``, and what
        :meth:`EpisodeStats.extend_record` adds), each ``[N, execute, ...]``.
    """
    n = env.num_envs
    running = torch.ones(n, dtype=torch.bool, device=chunk.device)  # the decision's episode has not ended yet
    reward, ended = torch.zeros(n, device=chunk.device), torch.zeros_like(running)
    terminated, truncated = torch.zeros_like(running), torch.zeros_like(running)
    final_obs: TensorDict | None = None
    records: list[dict[str, Any]] = []
    for i in range(execute):
        out = env.step(chunk[:, i])
        done = out.terminated | out.truncated
        reward = reward + torch.where(running, out.reward, torch.zeros_like(out.reward))
        terminated, truncated = terminated | (running & out.terminated), truncated | (running & out.truncated)
        final = as_tensordict(out.final_obs, n)
        final_obs = final if final_obs is None else _select(running, final, final_obs)
        ended, running = ended | (running & done), running & ~done
        record: dict[str, Any] = {"reward": out.reward, "done": done}
        stats.extend_record(out.info, record)
        records.append(record)
    steps = {key: torch.stack([record[key] for record in records], dim=1) for key in records[0]}
    decision = StepResult(out.obs, reward, terminated, truncated, cast(Tensor, final_obs), out.info)
    return decision, ended, steps


class Collector:
    """Fills one rollout per :meth:`collect` call, continuing episodes across calls.

    One environment step is the plain function :meth:`step`: act on the carried observation and policy state,
    step the env, return what rollout slot ``t`` records. A :class:`~embodirl.accel.loop.StepLoop` (:attr:`loop`)
    writes it into the rollout, carries the next observation and state, and compiles and captures the step
    (``accel``). A recurrent policy's state is recorded in the rollout (``policy_state``) and restarts where an
    episode ends. After the loop the rollout's rewards and flags are folded into :attr:`episode_stats` at once,
    and one masked critic pass bootstraps the transitions cut by a time limit (``final_value``; recurrent policies
    compute it inside the step), at most one host sync per rollout. With ``plan.first_episode_only`` the loop
    checks every few steps whether every env has finished an episode and then stops (the rest would be masked
    out); the rollout's non-tensor entry ``num_steps_collected`` says how many steps were simulated.

    Args:
        env: The training env.
        policy: The policy that acts.
        plan: Rollout length and reset behaviour requested by the algorithm.
        accel: Compile and/or capture :meth:`step`.
    """

    def __init__(self, env: BatchedEnv, policy: Policy, plan: CollectPlan, accel: Acceleration = EAGER) -> None:
        self.env, self.policy, self.plan = env, policy, plan
        n, t, dev = env.num_envs, plan.num_steps, env.device
        spec = observation_spec(env.observation_space)
        initial = policy.initial_state(n)
        self.recurrent = not initial.is_empty()
        self.rollout = allocate_rollout(n, t, spec, policy.dist.action_shape, policy.dist.action_dtype, dev,
                                        initial if self.recurrent else None, next_obs=plan.next_obs)
        self.episode_stats = EpisodeStats(n, dev, getattr(env, "info_metrics", ()), getattr(env, "reward_terms", ()))
        # A chunked policy's slot t is a decision of k env steps; the episode statistics count env steps.
        self.chunked = isinstance(policy.dist, Chunked)
        self.execute = policy.dist.chunk_execute
        if self.chunked and (self.recurrent or plan.next_obs):
            raise ValueError("action chunks (policy.action_chunk > 1) need a feedforward policy and an on-policy "
                             "algorithm (ppo, a2c, grpo): pass policy.action_chunk=1")
        # What slot t records besides the rollout: for the episode statistics (per env step of a chunk: [N, T, k]),
        # and the true final observation of a transition for the critic's bootstrap after the loop (recurrent
        # critics bootstrap inside the step).
        stats, per_step = self.episode_stats, ((self.execute,) if self.chunked else ())
        self.extras = TensorDict({"success": torch.zeros(n, t, *per_step, dtype=torch.bool, device=dev),
                                  "info": torch.zeros(n, t, *per_step, len(stats.info.keys), dtype=torch.float64,
                                                      device=dev),
                                  "reward_terms": torch.zeros(n, t, *per_step, len(stats.reward_terms),
                                                              dtype=torch.float64, device=dev)},
                                 batch_size=[n, t], device=dev)
        if self.chunked:
            self.extras.set("step_reward", torch.zeros(n, t, self.execute, device=dev))
            self.extras.set("step_done", torch.zeros(n, t, self.execute, dtype=torch.bool, device=dev))
        self.bootstraps_final_obs = policy.has_critic and not self.recurrent
        if self.bootstraps_final_obs:
            self.extras.set("final_obs", allocate(spec, (n, t), dev))
        carry = {"obs": allocate(spec, (n,), dev), "state": initial}
        records = {**dict(self.rollout.items()), **dict(self.extras.items())}
        self.loop = StepLoop(self.chunk_step if self.chunked else self.step, carry, records, dim=1, accel=accel,
                             device=dev, name="collection_step")
        self.started = False

    def step(self, carry: Carry) -> tuple[Values, Values]:
        """One env step: act, step the env, and return what rollout slot ``t`` records and the next carry."""
        obs, state = carry["obs"], carry["state"]
        action, log_prob, value, next_state = self.policy.act(obs, state)
        out, done, next_carry = env_step(self.env, action, next_state, self.recurrent)
        record: dict[str, Tensor | TensorCollection] = {
            "obs": obs, "action": action, "sample_log_prob": log_prob, "value": value, "reward": out.reward,
            "terminated": out.terminated, "truncated": out.truncated, "done": done}
        if self.bootstraps_final_obs:
            record["final_obs"] = out.final_obs
        if self.plan.next_obs:  # the env's final_obs is the true next observation, also where no episode ended
            record["next_obs"] = out.final_obs
        if self.recurrent:
            record["policy_state"] = state
            if self.policy.has_critic:  # the value of the true final observation, where a time limit cut
                final = self.policy.value(as_tensordict(out.final_obs, self.env.num_envs), next_state)
                record["final_value"] = torch.where(out.truncated & ~out.terminated, final, torch.zeros_like(final))
        self.episode_stats.extend_record(out.info, record)
        return record, next_carry

    def chunk_step(self, carry: Carry) -> tuple[Values, Values]:
        """One decision of a chunked policy: act, execute the chunk's first ``k`` actions (:func:`chunk_step`), and
        return what rollout slot ``t`` records (the whole chunk as the action) and the next carry."""
        obs = carry["obs"]
        chunk, log_prob, value, next_state = self.policy.act(obs, carry["state"])
        out, done, steps = chunk_step(self.env, chunk, self.execute, self.episode_stats)
        record: dict[str, Tensor | TensorCollection] = {
            "obs": obs, "action": chunk, "sample_log_prob": log_prob, "value": value, "reward": out.reward,
            "terminated": out.terminated, "truncated": out.truncated, "done": done,
            "step_reward": steps.pop("reward"), "step_done": steps.pop("done"), **steps}
        if self.bootstraps_final_obs:
            record["final_obs"] = out.final_obs
        return record, {"obs": out.obs, "state": next_state}

    @env_mode()
    def collect(self) -> TensorDict:
        """Run ``T`` steps and return the filled rollout (the same TensorDict every call; its tensors, allocated
        once, stay normal tensors: they are written in place under :func:`~embodirl.envs.base.env_mode`)."""
        if self.plan.reset_every_rollout or not self.started:
            self.reset()
        if not self.recurrent:
            self.rollout["final_value"].zero_()
        self.loop.rewind()
        num_steps = self._run_steps()
        self._fold_episodes(num_steps)
        if num_steps < self.plan.num_steps:
            self._pad(num_steps)
        self._bootstrap(num_steps)
        self.rollout.set_non_tensor("num_steps_collected", num_steps)
        self.rollout.set_non_tensor("num_env_steps", num_steps * self.execute)
        return self.rollout

    def _run_steps(self) -> int:
        """Step the loop through the rollout's slots in blocks (each one compiled program where the loop fuses
        them); the number of steps taken."""
        plan, done = self.plan, self.rollout["done"]
        # The steps between two looks from the host: restarts happen after every step, the first-episode check
        # every few steps; otherwise nothing interrupts the rollout.
        block = 1 if plan.restart_finished else _CHECK_EVERY if plan.first_episode_only else plan.num_steps
        t = 0
        while t < plan.num_steps:
            # first_episode_only: every few steps (one host sync), stop once every env has ended an episode.
            if plan.first_episode_only and t % _CHECK_EVERY == 0 and t > 0 and self._enough(done[:, :t]):
                return t
            num = min(block, plan.num_steps - t)
            self.loop.steps(num)
            if plan.restart_finished:  # the envs that just ended start over from the rollout's reset state
                self.loop.load_carry({"obs": self.env.restart(done[:, t])})
            t += num
        return t

    def _enough(self, done: Tensor) -> bool:
        """Whether the first-episode collection may stop after the steps of ``done`` ``[N, t]`` (one host sync)."""
        if self.plan.min_valid_fraction is None:
            return bool(done.any(1).all())
        return bool(done.any(1).all() & (complete_fraction(done) >= self.plan.min_valid_fraction))

    def _fold_episodes(self, num_steps: int) -> None:
        """Account the collected steps' episodes in :attr:`episode_stats` (``[N, T]`` read as ``[T, N]``)."""
        r, x, steps = self.rollout, self.extras, slice(0, num_steps)
        if self.chunked:  # [N, T, k] env steps read as [T k, N]
            def flat(value: Tensor) -> Tensor:
                return value[:, steps].flatten(1, 2).transpose(0, 1)
            self.episode_stats.add_steps(flat(x["step_reward"]), flat(x["step_done"]),
                                         flat(x["success"]) if self.episode_stats.reports_success else None,
                                         flat(x["info"]), flat(x["reward_terms"]))
            return
        self.episode_stats.add_steps(r["reward"][:, steps].t(), r["done"][:, steps].t(),
                                     x["success"][:, steps].t() if self.episode_stats.reports_success else None,
                                     x["info"][:, steps].transpose(0, 1), x["reward_terms"][:, steps].transpose(0, 1))

    def _pad(self, start: int) -> None:
        """Fill the slots the collector skipped with harmless padding: ended, zero reward. With ``restart_finished``
        not ended: the padding then continues each env's unfinished episode, which no complete-episode mask keeps."""
        ended = not self.plan.restart_finished
        for key in _TRANSITION:
            self.rollout.get(key)[:, start:-1] = ended and key in ("done", "terminated")

    def _bootstrap(self, num_steps: int) -> None:
        """Slot ``T``: the observation (and state) to continue from and its value; and the value of the true final
        observation of the transitions cut by a time limit (feedforward critics: one masked pass)."""
        obs, state = self.loop.carry["obs"], self.loop.carry["state"]
        self.rollout["obs"][:, -1] = obs
        self.rollout["value"][:, -1] = self.policy.value(obs, state)
        if self.recurrent:
            self.rollout["policy_state"][:, -1] = state
        if not self.bootstraps_final_obs:
            return
        steps = slice(0, num_steps)
        cut = self.rollout["truncated"][:, steps] & ~self.rollout["terminated"][:, steps]
        if cut.any():
            # One flat mask, not the [N, T] one: tensordict reads a 2-D mask as two index tensors and broadcasts
            # their shapes with torch.broadcast_shapes, which imports torch's symbolic shapes (sympy) on first use.
            final_obs = self.extras["final_obs"][:, steps].reshape(-1)[cut.reshape(-1)]
            no_state = self.policy.initial_state(final_obs.shape[0])  # empty: the policy is feedforward
            self.rollout["final_value"][:, steps][cut] = self.policy.value(final_obs, no_state)

    def use_cuda_graphs(self) -> None:
        """Record :meth:`step` as a CUDA graph at its next calls (after the compile warm-up, before training)."""
        self.loop.use_cuda_graphs()

    @env_mode()
    def reset(self, seed: int | None = None) -> None:
        """Start fresh episodes in every env (and the policy's state)."""
        group = self.plan.group_size if self.plan.reset_every_rollout else 1
        self.loop.load_carry({"obs": self.env.reset(seed=seed, group_size=group)})
        self.loop.carry["state"].zero_()
        self.episode_stats.discard()
        self.started = True

    def restart(self) -> None:
        """Forget every episode and statistic so far (the compile warm-up's); the next :meth:`collect` resets."""
        self.episode_stats.restart()
        self.started = False

    def pop_metrics(self, reduce: Callable[[Tensor], Tensor] | None = None) -> dict[str, float]:
        """The episode metrics since the last call (:meth:`EpisodeStats.pop`), e.g. summed over ranks by ``reduce``."""
        return self.episode_stats.pop(reduce)

    def state_dict(self) -> dict[str, Tensor]:
        """The current observation and policy state, and the episode statistics (to continue exactly)."""
        if not self.started:
            return {}
        obs, state = self.loop.carry["obs"], self.loop.carry["state"]
        out = {f"obs.{i}": obs.get(key).clone() for i, key in enumerate(self._obs_keys())}
        out.update({f"policy_state.{k}": v.clone() for k, v in state.flatten_keys(".").items()})
        out.update({f"episode_stats.{k}": v for k, v in self.episode_stats.state_dict().items()})
        return out

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.started = "obs.0" in state
        if not self.started:
            return
        obs = self.loop.carry["obs"]
        for i, key in enumerate(self._obs_keys()):
            obs.get(key).copy_(state[f"obs.{i}"])
        for key, value in self.loop.carry["state"].flatten_keys(".").items():
            value.copy_(state[f"policy_state.{key}"])
        prefix = "episode_stats."
        self.episode_stats.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})

    def _obs_keys(self) -> list[ObsKey]:
        """The observation's keys in the order checkpoints number them (``obs.0``, ``obs.1``, ...)."""
        return list(observation_spec(self.env.observation_space))
