"""Teacher-student distillation (DAgger) over the shared ``[N, T+1]`` rollout.

The student acts in the env (so it learns on the states its own mistakes lead to, Ross et al. 2011); a frozen
teacher, loaded from a finished run (``algo.teacher.run``, ``algo.teacher.checkpoint``), labels every visited
observation with its deterministic action in ``prepare``; ``loss`` regresses the student on those labels: the
squared (or Huber) error of the student's action mean for ``Box`` actions, the cross-entropy of the teacher's
action for ``Discrete`` ones (as rsl_rl's ``Distillation``). The teacher reads its own observation keys (privileged
state), the student its own (pixels): the env must provide both in one rollout (push_cube:
``env.obs_mode=state_rgb``), which is checked with the action spaces before training.

The teacher is rebuilt from its run's stored config as ``embodirl-eval`` does: the checkpoint is loaded with
``weights_only=True`` (:func:`~embodirl.runtime.checkpoint.load_checkpoint`) and its config may only name classes
embodirl ships or ``algo.teacher.trusted_targets`` lists (:mod:`embodirl.config.trust`).
"""

from __future__ import annotations

import hashlib
import logging
import typing
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor
from torch.nn import functional as torch_f

from embodirl.accel.compile import Acceleration
from embodirl.algos import functional as F
from embodirl.algos.base import EAGER, OnPolicyAlgorithm
from embodirl.collect.collector import CollectPlan
from embodirl.config.algos import DistillConfig, TeacherConfig
from embodirl.config.envs import EnvNode, EnvSetupConfig
from embodirl.config.instantiate import instantiate, to_node
from embodirl.config.policies import PolicyNode
from embodirl.config.trust import check_config_from_file, with_moved_targets
from embodirl.envs.base import BatchedEnv
from embodirl.envs.observations import ObsSpec, key_name, observation_spec
from embodirl.envs.wrapping import wrap_env
from embodirl.errors import CheckpointError, ConfigError
from embodirl.policies.base import Policy
from embodirl.runtime.checkpoint import load_checkpoint
from embodirl.runtime.status import process_gone, read_status

__all__ = ["Distill", "clipped_action_error", "load_teacher", "teacher_checkpoint", "teacher_fingerprint"]

log = logging.getLogger(__name__)

RUN_KEY = "algo.teacher.run"


def teacher_checkpoint(cfg: TeacherConfig) -> Path:
    """The checkpoint file ``algo.teacher.run`` and ``algo.teacher.checkpoint`` name.

    Raises:
        ConfigError: The run is no run directory, or it holds no such checkpoint.
    """
    run = Path(str(cfg.run))
    folder = run / "checkpoints"
    if not folder.is_dir():
        raise ConfigError(RUN_KEY, cfg.run, "the run directory of a finished embodirl-train run (one that holds "
                          "checkpoints/)", "train a teacher first (embodirl-train experiment=ppo_push_cube_teacher) "
                          "and pass the run directory it printed", absolute=True)
    name = cfg.checkpoint
    if "/" in name or "\\" in name:
        raise ConfigError("algo.teacher.checkpoint", name, f"best, last or a file name in {folder}",
                          "pass algo.teacher.checkpoint=best", absolute=True)
    path = folder / (f"{name}.pt" if name in ("best", "last") else name)
    if not path.is_file():
        found = ", ".join(sorted(p.name for p in folder.glob("*.pt"))) or "none"
        raise ConfigError("algo.teacher.checkpoint", name, f"a checkpoint present in {folder} (found: {found})",
                          "pass algo.teacher.checkpoint=last, or one of the files found", absolute=True)
    return path


def load_teacher(cfg: TeacherConfig, device: torch.device) -> tuple[Policy, gym.Space, gym.Space]:
    """The teacher policy of ``cfg``'s checkpoint, frozen and in eval mode on ``device``, with the observation and
    action spaces it was trained on (from one copy of its env, built on the CPU and closed again).

    Raises:
        ConfigError: No such run or checkpoint.
        CheckpointError: An unreadable or hostile file, a config naming untrusted code, weights that do not fit.
    """
    path = teacher_checkpoint(cfg)
    where = f"algo.teacher.checkpoint={str(path)!r}"
    state = load_checkpoint(path, key="algo.teacher.checkpoint")
    config = with_moved_targets(state["config"])
    check_config_from_file(config, where, cfg.trusted_targets)
    env_node = to_node({**config["env"], "num_envs": 1}, "algo.teacher.env.", EnvNode)
    env = instantiate(env_node, "algo.teacher.env.", device=torch.device("cpu"), seed=0)
    try:  # the spaces the teacher's policy saw: its env inside the wrappers its run turned on
        env = wrap_env(env, typing.cast(EnvSetupConfig, env_node.setup), seed=0)
        obs_space, action_space = env.observation_space, env.action_space
    finally:
        env.close()
    policy_node = to_node(config["policy"], "algo.teacher.policy.", PolicyNode)  # its init_from/freeze split off
    teacher = instantiate(policy_node, "algo.teacher.policy.", observation_space=obs_space, action_space=action_space)
    try:
        teacher.load_state_dict(state["policy"])
    except (RuntimeError, KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{where}: its policy weights do not fit its own config "
                              f"({str(exc).splitlines()[0]})") from None
    if getattr(teacher, "is_recurrent", False):
        raise ConfigError(RUN_KEY, cfg.run, "a run whose policy is feedforward (a recurrent teacher would need its "
                          "state carried along the student's episodes)", "train the teacher with policy=actor_critic",
                          absolute=True)
    teacher.requires_grad_(False)
    return typing.cast(Policy, teacher.to(device).eval()), obs_space, action_space


def teacher_fingerprint(state: typing.Mapping[str, Tensor]) -> str:
    """``sha256:<hex>`` of a teacher's policy weights (names, dtypes, shapes and bytes): what the student learns
    from, whatever else its checkpoint holds (counters, optimizer state) or however it was saved."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{list(tensor.shape)};".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return "sha256:" + digest.hexdigest()


def warn_if_training(cfg: TeacherConfig) -> None:
    """Say so when the teacher's run is still training: its checkpoint may be replaced while students read it."""
    record = read_status(str(cfg.run))
    if record is not None and record.get("status") == "running" and not process_gone(record):
        log.warning("the teacher %s is still training (its status.json says running, pid %s): its checkpoints/%s "
                    "may change under this student; a resumed student refuses a changed teacher. Wait for the "
                    "teacher to finish, or copy its checkpoint into a run directory of its own and pass that",
                    cfg.run, record.get("pid"), teacher_checkpoint(cfg).name)


def clipped_action_error(action: Tensor, target: Tensor, low: Tensor, high: Tensor) -> Tensor:
    """``action - target`` (``[B, A]``), except beyond a bound the target sits on: the env clips both actions to the
    bound, so overshooting it costs nothing (teachers trained with PPO often saturate, and a student asked to stop
    exactly at the bound would spend its capacity there).

    Example: bounds ``[-1, 1]``, target ``[1, -1, 0.5]``, action ``[1.5, -0.5, 0.7]`` -> ``[0, 0.5, 0.2]``.
    """
    error = action - target
    error = torch.where(target >= high, error.clamp(max=0.0), error)
    return torch.where(target <= low, error.clamp(min=0.0), error)


def _same_action_space(a: gym.Space, b: gym.Space) -> bool:
    if isinstance(a, gym.spaces.Discrete) and isinstance(b, gym.spaces.Discrete):
        return int(a.n) == int(b.n)
    if isinstance(a, gym.spaces.Box) and isinstance(b, gym.spaces.Box):
        return a.shape == b.shape and np.array_equal(a.low, b.low) and np.array_equal(a.high, b.high)
    return False


def _short(fingerprint: object) -> str:
    """``sha256:`` and the first 16 hex digits: enough to tell two teachers apart in one line."""
    return str(fingerprint)[:23]


def _describe(spec: ObsSpec) -> str:
    return ", ".join(f"{key_name(k)} {list(shape)} {str(dtype).removeprefix('torch.')}"
                     for k, (shape, dtype) in spec.items())


class Distill(OnPolicyAlgorithm):
    """DAgger distillation of a frozen teacher's deterministic actions into the student policy.

    Args:
        cfg: The keys of ``algo=distill`` (:class:`~embodirl.config.algos.DistillConfig`).
        policy: The student, a feedforward policy (its critic, if any, is not trained).
        device: Device of policy and rollouts.
        total_env_steps: Training budget (horizon of the schedules).
        accel: Compile (and later capture) the update's steps.
    """

    cfg: DistillConfig
    metric_names = ("loss/distill", "diag/teacher_agreement", "diag/epochs")

    def __init__(self, cfg: DistillConfig, *, policy: Policy, device: torch.device, total_env_steps: int,
                 accel: Acceleration = EAGER) -> None:
        if policy.is_recurrent or not callable(getattr(policy, "action_params", None)):
            raise ConfigError("policy", type(policy).__name__, "a feedforward policy with algo=distill (one with "
                              "action_params, e.g. actor_only or actor_critic)", "pass policy=actor_only",
                              absolute=True)
        warn_if_training(cfg.teacher)
        self.teacher, self.teacher_obs_space, self.teacher_action_space = load_teacher(cfg.teacher, device)
        self.teacher_path = teacher_checkpoint(cfg.teacher)
        self.teacher_fingerprint = teacher_fingerprint(self.teacher.state_dict())
        spec = observation_spec(self.teacher_obs_space)
        names = getattr(self.teacher, "actor_keys", None) or [key_name(k) for k in spec]
        self.teacher_spec: ObsSpec = {k: v for k, v in spec.items() if key_name(k) in names}
        super().__init__(cfg, policy=policy, device=device, total_env_steps=total_env_steps, accel=accel)
        space = self.teacher_action_space
        self.discrete = isinstance(space, gym.spaces.Discrete)
        # The env clips actions to a bounded Box: a teacher's mean beyond the bounds acts like the bound itself.
        self.bounds: tuple[Tensor, Tensor] | None = None
        if isinstance(space, gym.spaces.Box) and bool(np.isfinite(space.low).all() & np.isfinite(space.high).all()):
            self.bounds = (torch.as_tensor(space.low, device=self.device),
                           torch.as_tensor(space.high, device=self.device))
        log.info("teacher: %s from %s (reads %s)", type(self.teacher).__name__, cfg.teacher.run,
                 _describe(self.teacher_spec))

    def collect_plan(self, env: BatchedEnv) -> CollectPlan:
        """Check that ``env`` gives the teacher its observation keys and has its action space."""
        have = observation_spec(env.observation_space)
        for key, leaf in self.teacher_spec.items():
            if have.get(key) != leaf:
                raise ConfigError(RUN_KEY, self.cfg.teacher.run, f"a teacher whose observation keys the env provides "
                                  f"(the teacher reads {_describe({key: leaf})}; the env gives {_describe(have)})",
                                  "make the env provide both the teacher's and the student's keys (push_cube: "
                                  "env.obs_mode=state_rgb), or train the teacher on keys this env gives", absolute=True)
        if not _same_action_space(self.teacher_action_space, env.action_space):
            raise ConfigError(RUN_KEY, self.cfg.teacher.run, f"a teacher with the env's action space (the teacher acts "
                              f"in {self.teacher_action_space}, the env in {env.action_space})",
                              "train the teacher on this env's action space (e.g. the same env.control_mode)",
                              absolute=True)
        return CollectPlan(num_steps=self.cfg.num_steps)

    def state_dict(self) -> dict[str, Any]:
        """The base state and the teacher's fingerprint: a resumed student must learn from the same teacher."""
        teacher = {"fingerprint": self.teacher_fingerprint, "checkpoint": str(self.teacher_path)}
        return {**super().state_dict(), "teacher": teacher}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the base state; refuse a teacher whose weights differ from the checkpoint's (unless
        ``algo.teacher.allow_change``).

        Raises:
            CheckpointError: The teacher changed since the student's checkpoint was saved.
        """
        saved = state.get("teacher")
        if isinstance(saved, dict) and saved.get("fingerprint") != self.teacher_fingerprint:
            was = f"{_short(saved.get('fingerprint'))} from {saved.get('checkpoint')!r}"
            now = f"{_short(self.teacher_fingerprint)} from {str(self.teacher_path)!r}"
            if not self.cfg.teacher.allow_change:
                raise CheckpointError(
                    f"the student's checkpoint was trained by the teacher {was}, but the teacher now is {now} (its "
                    "weights changed, e.g. it went on training): resuming would silently mix two teachers. Fix: "
                    "restore the teacher's checkpoint, or pass hydra.run.dir=<a new directory> to train the student "
                    "afresh, or algo.teacher.allow_change=true to continue with the new teacher")
            log.warning("algo.teacher.allow_change=true: the student, trained by the teacher %s, continues with the "
                        "teacher %s", was, now)
        super().load_state_dict(state)

    @torch.no_grad()
    def prepare(self, rollout: TensorDict) -> TensorDict:
        """The visited observations ``[N*T]`` with the teacher's deterministic action for each."""
        obs = rollout["obs"][:, :-1].reshape(-1)
        action, _ = self.teacher.mode(obs.select(*self.teacher_spec), self.teacher.initial_state(obs.batch_size[0]))
        if self.bounds is not None:
            action = torch.maximum(torch.minimum(action, self.bounds[1]), self.bounds[0])
        return TensorDict({"obs": obs, "teacher_action": action}, batch_size=obs.batch_size)

    def loss(self, batch: TensorDict) -> dict[str, Tensor]:
        """The student's regression on the teacher's actions (weighted mean over the batch)."""
        weight, target = batch["weight"], batch["teacher_action"]
        params = self.policy.action_params(batch["obs"])  # type: ignore[attr-defined]  # checked in __init__
        dist = self.policy.dist
        if self.discrete:
            per_sample = -dist.log_prob(params, target)
            agreement = (dist.mode(params) == target).float()
        else:
            error = self._error(dist.mode(params), target)
            per_sample = (error.square() if self.cfg.loss == "mse" else
                          torch_f.huber_loss(error, torch.zeros_like(error), reduction="none")).mean(-1)
            agreement = (error.abs() < 0.1 * self._scale()).all(-1).float()
        loss = F.weighted_mean(per_sample, weight)
        agreement = F.weighted_mean(agreement.detach(), weight)
        return {"loss": loss, "loss/distill": loss, "diag/teacher_agreement": agreement}

    def _error(self, action: Tensor, target: Tensor) -> Tensor:
        return action - target if self.bounds is None else clipped_action_error(action, target, *self.bounds)

    def _scale(self) -> Any:
        """The width of the action range (1 where unbounded): agreement means within 10 % of it."""
        return 1.0 if self.bounds is None else self.bounds[1] - self.bounds[0]
