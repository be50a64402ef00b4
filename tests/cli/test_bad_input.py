"""Every bad input a user can type gets one line naming the key, the value, what is valid and the fix; exit 2.

Each case runs ``embodirl-train`` on a tiny config, in this process (``main()`` with ``sys.argv`` patched, see
the ``cli`` fixture in ``tests/conftest.py``), and checks: exit status 2, exactly one line on stderr
(``embodirl-train: error: ...`` containing the expected fragments), no traceback, and nothing trained (no
``metrics.jsonl``). Two cases also run as a user runs them (the console script in a subprocess).
"""

import importlib.util
import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY, compose_config, representatives, run_cli

BAD_INPUTS = [
    # --- config groups and override syntax (Hydra) ---
    (["algo=nonexistent"], ["algo=nonexistent", "grpo, ppo", "Fix: pass algo="]),
    (["env=nonexistent"], ["env=nonexistent", "cartpole", "push_cube", "Fix:"]),
    (["policy=nonexistent"], ["policy=nonexistent", "actor_critic", "Fix:"]),
    (["trainer=nonexistent"], ["trainer=nonexistent", "debug", "Fix:"]),
    (["logger=nonexistent"], ["logger=nonexistent", "default", "Fix:"]),
    (["+experiment=nonexistent"], ["experiment=nonexistent", "ppo_cartpole", "Fix:"]),
    (["+sweep=nonexistent"], ["sweep=nonexistent", "seeds", "Fix:"]),
    (["algo.foo=1"], ["algo.foo=1 is invalid: algo=ppo has no key foo", "Fix: remove algo.foo", "--help"]),
    (["algo.learning_rat=1e-3"], ["algo.learning_rat=0.001", "did you mean algo.learning_rate?",
                                  "Fix: pass algo.learning_rate=0.001"]),
    (["algo.group_size=4"], ["algo=ppo has no key group_size; it is a key of algo=grpo",
                             "Fix: pass algo=grpo algo.group_size=4"]),
    (["algo.optimizer.momentum=0.9"], ["it is a key of algo/optimizer=sgd",
                                       "Fix: pass algo/optimizer=sgd algo.optimizer.momentum=0.9"]),
    (["+experiment=ppo_pushcube"], ["experiment=ppo_pushcube", "Fix: pass experiment=ppo_push_cube"]),
    (["experiment=ppo_pushcube"], ["experiment=ppo_pushcube", "Fix: pass experiment=ppo_push_cube"]),
    (["algo=PPO"], ["algo=PPO", "Fix: pass algo=ppo"]),  # case folded (was: Fix: pass algo=a2c)
    (["algo.learning_rate=["], ["algo.learning_rate=[", "Fix:"]),
    (["foo"], ["'foo'", "key=value"]),
    (["algo.learning_rate=1e-3,2e-3"], ["algo.learning_rate=1e-3,2e-3", "--multirun"]),
    # --- top level ---
    # a key of that name one level down before a spelling guess (was: did you mean num_threads? 512 torch threads)
    (["num_envs=512"], ["the top level has no key num_envs", "did you mean env.num_envs?",
                        "eval.num_envs: separate env copies", "Fix: pass env.num_envs=512"]),
    (["lr=1e-3"], ["lr=0.001", "did you mean algo.learning_rate? algo.learning_rate: learning rate",
                   "Fix: pass algo.learning_rate=0.001"]),  # initials: l(earning) r(ate)
    (["num_thread=2"], ["did you mean num_threads? num_threads: torch intra-op threads", "Fix: pass num_threads=2"]),
    (["+foo=1"], ["foo=1", "top-level key", "~foo"]),
    (["seed=abc"], ["seed='abc'", "an int", "Fix:"]),
    (["seed=1.5"], ["seed=1.5", "an int", "Fix:"]),
    (["num_threads=0"], ["num_threads=0", "an int >= 1", "Fix:"]),
    (["num_threads=abc"], ["num_threads='abc'", "Fix:"]),
    (["num_update_threads=-1"], ["num_update_threads=-1", "Fix:"]),
    (["device=tpu"], ["device='tpu'", "auto, cpu, cuda", "Fix:"]),
    (["device=cuda:7"], ["device='cuda:7'", "Fix: pass device=cpu"]),
    (["objective=nonsense"], ["objective='nonsense'", "eval/return_mean", "Fix:"]),
    (["hydra.run.dir=/proc/x"], ["/proc/x", "Fix:"]),
    # --- algo (PPO) ---
    (["algo.clip_coef=-1"], ["algo.clip_coef=-1", "a float > 0", "Fix:"]),
    (["algo.learning_rate=0"], ["algo.learning_rate=0", "a float > 0", "Fix:"]),
    (["algo.learning_rate=abc"], ["algo.learning_rate='abc'", "float", "Fix:"]),
    (["algo.learning_rate="], ["algo.learning_rate=''", "float", "Fix:"]),
    (["algo.gamma=1.5"], ["algo.gamma=1.5", "[0, 1]", "Fix:"]),
    (["algo.gae_lambda=-0.1"], ["algo.gae_lambda=-0.1", "[0, 1]", "Fix:"]),
    (["algo.num_epochs=0"], ["algo.num_epochs=0", "an int >= 1", "Fix:"]),
    (["algo.num_epochs=2.5"], ["algo.num_epochs=2.5", "int", "Fix:"]),
    (["algo.num_steps=0"], ["algo.num_steps=0", "an int >= 1", "Fix:"]),
    (["algo.minibatch_size=0"], ["algo.minibatch_size=0", "null or an int >= 1", "Fix:"]),
    (["algo.lr_schedule=cosinus"], ["algo.lr_schedule='cosinus'", "constant", "Fix:"]),
    (["algo.max_grad_norm=0"], ["algo.max_grad_norm=0", "Fix:"]),
    (["algo.target_kl=-1"], ["algo.target_kl=-1", "Fix:"]),
    (["algo.ent_coef=-0.1"], ["algo.ent_coef=-0.1", "Fix:"]),
    (["algo.vf_coef=-1"], ["algo.vf_coef=-1", "Fix:"]),
    (["algo.clip_value_coef=0"], ["algo.clip_value_coef=0", "Fix:"]),
    (["algo.normalize_advantage=maybe"], ["algo.normalize_advantage='maybe'", "true or false", "Fix:"]),
    # --- algo knobs (schedules, optimizer, accumulation, amp, dual clip) ---
    (["algo.lr_schedule=[[500,1e-3],[0,3e-4]]"], ["algo.lr_schedule=[[500, 0.001], [0, 0.0003]]", "increasing",
                                                 "Fix: sort the pairs"]),
    (["algo.lr_schedule=[[0,-1e-3]]"], ["algo.lr_schedule=[[0, -0.001]]", "values >= 0", "Fix:"]),
    (["algo.lr_schedule=[[0,1e-3]]", "algo.lr_schedule_kind=smooth"], ["algo.lr_schedule_kind='smooth'", "step, interp",
                                                                      "Fix:"]),
    (["algo.ent_coef_schedule=adaptive_kl"], ["algo.ent_coef_schedule='adaptive_kl'", "cosine", "Fix:"]),
    (["algo.desired_kl=0"], ["algo.desired_kl=0", "a float > 0", "Fix:"]),
    (["algo.adam_eps=1e-8"], ["algo.adam_eps", "algo.optimizer.eps", "Fix: pass algo.optimizer.eps=1e-8"]),
    (["+algo.adam_eps=1e-8"], ["algo.adam_eps=1e-08", "Fix: pass algo.optimizer.eps=1e-08"]),
    (["algo/optimizer=rmsprop"], ["algo/optimizer=rmsprop", "adam, adamw, sgd", "Fix:"]),
    (["algo.optimizer._target_=torch.optim.SGD"], ["algo.optimizer.eps=1e-05", "momentum", "~algo.optimizer.eps",
                                                   "algo/optimizer=adam, adamw or sgd"]),
    (["+algo.optimizer.lr=0.1"], ["algo.optimizer.lr=0.1", "algo.learning_rate", "Fix:"]),
    (["algo.accumulate_minibatches=0"], ["algo.accumulate_minibatches=0", "an int >= 1", "Fix:"]),
    # --- renamed algo keys: one line naming the new key ---
    (["algo.n_epochs=2"], ["algo.n_epochs is no longer a key: it was renamed to algo.num_epochs",
                           "Fix: pass algo.num_epochs=2"]),
    (["algo.batch_size=64"], ["renamed to algo.minibatch_size", "Fix: pass algo.minibatch_size=64"]),
    (["+algo.batch_size=64"], ["algo.batch_size=64 is invalid", "renamed to algo.minibatch_size",
                               "Fix: pass algo.minibatch_size=64"]),
    (["algo.accumulate_grad_batches=2"], ["renamed to algo.accumulate_minibatches",
                                          "Fix: pass algo.accumulate_minibatches=2"]),
    (["algo=grpo", "algo.truncate_at_first_done=false"], ["renamed to algo.first_episode_only",
                                                          "Fix: pass algo.first_episode_only=false"]),
    (["algo.amp=fp8"], ["algo.amp='fp8'", "off, bf16, fp16", "Fix:"]),
    (["algo.dual_clip_coef=0.5"], ["algo.dual_clip_coef=0.5", "a float > 1", "Fix:"]),
    (["algo.shuffle_minibatches=sometimes"], ["algo.shuffle_minibatches='sometimes'", "true or false", "Fix:"]),
    # --- algo (GRPO) ---
    (["algo=grpo", "algo.group_size=1"], ["algo.group_size=1", "Fix: pass algo.group_size=4"]),
    (["algo=grpo", "algo.group_size=3"], ["env.num_envs=8", "algo.group_size=3", "Fix:"]),
    (["algo=grpo", "policy=actor_critic"], ["policy='ActorCritic'", "Fix:", "pass policy=actor_only"]),
    (["algo=grpo", "algo.kl_coef=-1"], ["algo.kl_coef=-1", "Fix:"]),
    # --- algo (A2C) ---
    (["algo=a2c", "algo.lr_schedule=adaptive_kl"], ["algo.lr_schedule='adaptive_kl'", "algo=a2c",
                                                    "Fix: pass algo.lr_schedule=constant"]),
    (["algo=a2c", "policy=actor_critic_rnn"],
     ["policy='ActorCriticRNN'", "feedforward", "Fix: pass policy=actor_critic"]),
    # --- policy ---
    (["policy.activation=sigmoidz"], ["policy.activation='sigmoidz'", "relu", "Fix:"]),
    (["policy.hidden_sizes=[0]"], ["policy.hidden_sizes=[0]", "a list of ints >= 1", "Fix:", "[64,64]"]),
    (["policy.hidden_sizes=abc"], ["policy.hidden_sizes='abc'", "Fix:"]),
    (["policy.log_std_min=3"], ["policy.log_std_min=3", "below log_std_max", "Fix:"]),
    (["policy.normalize_obs=maybe"], ["policy.normalize_obs='maybe'", "true or false", "Fix:"]),
    # --- env ---
    (["env.num_envs=0"], ["env.num_envs=0", "an int >= 1", "Fix:"]),
    (["env.num_envs=-5"], ["env.num_envs=-5", "Fix:"]),
    (["env.num_envs=1e12"], ["env.num_envs=1000000000000", "fit in memory", "Fix: lower env.num_envs"]),
    (["env.max_episode_steps=0"], ["env.max_episode_steps=0", "Fix:"]),
    (["env.physics_dtype=float16"], ["env.physics_dtype='float16'", "float64", "Fix:"]),
    (["env.foo=1"], ["env.foo=1 is invalid: env=cartpole has no key foo", "Fix: remove env.foo"]),
    (["env.id=Pendulum-v1"], ["env=cartpole has no key id; it is a key of env=gym",
                              "Fix: pass env=gym env.id=Pendulum-v1"]),
    (["+env.foo=1"], ["env.foo=1", "a key of", "remove"]),
    (["env=gym", "env.id=CartPol-v1"], ["env.id='CartPol-v1'", "did you mean CartPole-v1", "Fix:"]),
    (["env=gym", "env.vectorization_mode=threads"], ["env.vectorization_mode='threads'", "sync", "Fix:"]),
    (["env=gym", "env.num_envs=100000000"], ["env.num_envs=100000000", "Fix:"]),
    (["env=push_cube", "env.control_mode=teleport"], ["env.control_mode='teleport'", "ee_delta_pos", "Fix:"]),
    (["env=push_cube", "env.goal_radius=0"], ["env.goal_radius=0", "Fix:"]),
    (["env=push_cube", "env.max_speed=5"], ["env.max_speed=5", "tunnelling", "Fix:"]),
    (["env.obs_noise={state:-0.1}"], ["env.obs_noise.state=-0.1", "a float in [0, 100]",
                                      "Fix: pass env.obs_noise.state="]),
    (["env.obs_noise={velocity:0.1}"], ["env.obs_noise.velocity=0.1", "one of: state",
                                        "Fix: pass env.obs_noise={state:0.01}"]),
    (["env.action_delay=-1"], ["env.action_delay=-1", "an int in [0, 100]", "Fix: pass env.action_delay=0"]),
    (["env.action_repeat=0"], ["env.action_repeat=0", "an int in [1, 100]", "Fix: pass env.action_repeat=1"]),
    (["env.action_noise=0.1"], ["env.action_noise=0.1", "Box actions only", "Fix: pass env.action_noise=0"]),
    (["env=push_cube", "env.action_noise=-0.1"], ["env.action_noise=-0.1", ">= 0", "Fix:"]),
    (["env=gym", "env.info_metrics=[foo]"], ["env.info_metrics='foo'", "a key of the info CartPole-v1 returns",
                                              "Fix: remove foo from env.info_metrics"]),
    # --- env.randomize (domain randomization) ---
    (["env=push_cube", "+env.randomize.frction={range: [0.5, 2]}"],
     ["env.randomize.frction=", "a parameter this env randomizes", "table_friction",
      "Fix: use one of those names (the closest to frction is"]),
    (["+env.randomize.pole_length={range: [2, 0.5]}"], ["env.randomize.pole_length.range=[2, 0.5]", "low <= high",
                                                        "Fix: pass env.randomize.pole_length.range=[0.5,2]"]),
    (["+env.randomize.pole_length={range: [0, 2], dist: log_uniform}"],
     ["env.randomize.pole_length.range=[0, 2]", "low > 0 with dist=log_uniform", "Fix:"]),
    (["+env.randomize.pole_length={range: [1, 2], dist: normal}"],
     ["env.randomize.pole_length.dist='normal'", "uniform, log_uniform", "Fix:"]),
    (["env=push_cube", "+env.randomize.actuator_gain={range: [0.5, 3]}"],
     ["env.randomize.actuator_gain.range=[0.5, 3]", "tunnel", "Fix: narrow the range, or raise substeps to 8"]),
    # --- trainer.curriculum ---
    (["+trainer.curriculum.c={param: pole_length, levels: [[1, 1]], every_env_steps: 100}"],
     ["trainer.curriculum.c.param='pole_length'", "randomized here: none",
      "Fix: add +env.randomize.pole_length.range=[1,1]"]),
    (["+env.randomize.pole_length.range=[1,1]",
      "+trainer.curriculum.c={param: pole_length, levels: [[1, 1]], metric: eval/retrun_mean, threshold: 1}"],
     ["trainer.curriculum.c.metric='eval/retrun_mean'", "eval/return_mean", "Fix:"]),
    (["+env.randomize.pole_length.range=[1,1]", "+trainer.curriculum.c={param: pole_length, levels: [[1, 1]]}"],
     ["trainer.curriculum.c.every_env_steps=None", "metric and threshold", "Fix:"]),
    # --- trainer ---
    (["trainer.total_env_steps=0"], ["trainer.total_env_steps=0", "an int >= 1", "Fix:"]),
    (["trainer.total_env_steps=abc"], ["trainer.total_env_steps='abc'", "int", "Fix:"]),
    # the evaluation's cadence and sizes moved to the eval node: the old names say where
    (["trainer.eval_every_env_steps=4096"], ["trainer.eval_every_env_steps", "renamed to eval.every_env_steps",
                                             "Fix: pass eval.every_env_steps=4096"]),
    (["trainer.num_eval_envs=4"], ["trainer.num_eval_envs", "renamed to eval.num_envs", "Fix: pass eval.num_envs=4"]),
    (["trainer.num_eval_episodes=4"], ["trainer.num_eval_episodes", "renamed to eval.num_episodes",
                                       "Fix: pass eval.num_episodes=4"]),
    (["trainer.eval_env_overrides={max_episode_steps: 9}"],
     ["trainer.eval_env_overrides", "renamed to eval.env_overrides",
      "Fix: pass eval.env_overrides={max_episode_steps: 9}"]),
    (["+trainer.num_eval_envs=4"], ["trainer.num_eval_envs=4", "renamed to eval.num_envs",
                                    "Fix: pass eval.num_envs=4"]),
    (["trainer.keep_checkpoints=-1"], ["trainer.keep_checkpoints=-1", "Fix:"]),
    (["trainer.max_wall_time_s=-5"], ["trainer.max_wall_time_s=-5", "Fix:"]),
    (["trainer.stop_on_solved=maybe"], ["trainer.stop_on_solved='maybe'", "true or false", "Fix:"]),
    (["trainer.resume=/nonexistent/last.pt"], ["trainer.resume='/nonexistent/last.pt'", "does not exist", "Fix:"]),
    (["trainer.stop_on=[{metric: eval/retrun_mean, op: '>=', value: 1}]"],
     ["trainer.stop_on[0].metric='eval/retrun_mean'", "eval/return_mean", "Fix:"]),
    (["trainer.stop_on=[{metric: eval/return_mean, op: '=>', value: 1}]"],
     ["trainer.stop_on[0].op='=>'", ">=", "Fix:"]),
    (["trainer.stop_on=[{metric: eval/return_mean, plateau: {patience_evals: 0}}]"],
     ["trainer.stop_on[0].plateau.patience_evals=0", "an int >= 1", "Fix:"]),
    (["env.solved_threshold=abc"], ["env.solved_threshold='abc'", "null or a float",
                                    "Fix: pass e.g. env.solved_threshold=400"]),
    (["env.solved_metric=return"], ["env.solved_metric='return'", "eval/return_mean", "Fix:"]),
    # --- logger ---
    (["logger.console=fancy"], ["logger.console='fancy'", "auto, bar, lines, none", "Fix:"]),
    (["logger.tensorboard=maybe"], ["logger.tensorboard='maybe'", "true or false", "Fix:"]),
    (["logger.console_every_s=abc"], ["logger.console_every_s='abc'", "float", "Fix:"]),
    (["logger.console_every_s=0"], ["logger.console_every_s=0", "Fix:"]),
    (["logger.wandb.mode=bogus"], ["logger.wandb.mode='bogus'", "online", "Fix:"]),
    (["logger.wandb.enabled=maybe"], ["logger.wandb.enabled='maybe'", "true or false", "Fix:"]),
    (["+logger.wandb.projekt=x"], ["logger.wandb.projekt='x'", "project", "Fix:"]),
    # --- evaluation ---
    (["eval.every_env_steps=0"], ["eval.every_env_steps=0", "an int >= 1", "Fix:"]),
    (["eval.num_envs=0"], ["eval.num_envs=0", "an int >= 1", "Fix:"]),
    (["eval.num_episodes=0"], ["eval.num_episodes=0", "an int >= 1", "Fix:"]),
    (["eval.env_overrides={num_envs: 4}"], ["eval.env_overrides.num_envs=4", "Fix: set the number with eval.num_envs"]),
    (["eval.env_overrides=[1]"], ["eval.env_overrides", "mapping", "Fix:"]),
    (["eval.video=maybe"], ["eval.video='maybe'", "true or false", "Fix:"]),
    (["eval.video=true", "eval.video_size=8"], ["eval.video_size=8", "[16, 2048]", "Fix:"]),
    (["env=push_cube", "eval.video=true", "eval.video_format=avi"], ["eval.video_format='avi'", "mp4", "Fix:"]),
    # --- found by trying to break it (issue 20): each was a traceback or silently accepted ---
    (["device=cpu:1"], ["device='cpu:1'", "Fix: pass device=cpu"]),
    (["algo.optimizer.eps=-1"], ["algo.optimizer.eps=-1", "Fix:"]),
    (["+algo.optimizer.weight_decay=-1"], ["algo.optimizer.weight_decay=-1", "Fix:"]),
    (["algo/optimizer=sgd", "algo.optimizer.momentum=-1"], ["algo.optimizer.momentum=-1", "Fix:"]),
    (["+algo.optimizer.betas=[0.9]"], ["algo.optimizer.betas=[0.9]", "two floats", "Fix:"]),
    (["policy.freeze=['*']"], ["policy.freeze=['*']", "every parameter", "Fix:"]),
    (["env=gym", "env.env_kwargs=[1,2]"], ["env.env_kwargs=[1,2]", "mapping", "Fix:"]),
    (["env=gym", "+env.env_kwargs.bogus=1"],
     ["env.env_kwargs.bogus=1", "CartPole-v1", "Fix: remove env.env_kwargs.bogus"]),
    (["trainer.stop_on={}"], ["trainer.stop_on={}", "a list", "Fix:"]),
    (["logger.wandb.tags=abc"], ["logger.wandb.tags='abc'", "list", "Fix:"]),
    (["env=push_cube", "policy.init_log_std=nan"], ["policy.init_log_std=nan", "finite", "Fix:"]),
    (["env=gym", "env.id=Pendulum-v1", "+env.env_kwargs.g=nan"], ["env.env_kwargs.g=nan", "finite", "Fix:"]),
    (["policy.hidden_sizes=[100000,100000]"], ["policy.hidden_sizes=[100000, 100000]", "GB", "Fix:"]),
    (["policy.critic_hidden_sizes=[0]"], ["policy.critic_hidden_sizes=[0]", "a list of ints >= 1", "Fix:"]),
    (["+policy/encoder@policy.encoders.state=cnn"], ["policy.encoders.state", "image", "Fix:"]),
    (["seed=9223372036854775807"], ["seed=9223372036854775807", "Fix: pass seed=0"]),
    (["objective=loss/nonexistent"], ["objective='loss/nonexistent'", "loss/policy", "Fix:"]),
    (["algo.clip_coef=inf"], ["algo.clip_coef=inf", "finite", "Fix:"]),
    (["algo.learning_rate=inf"], ["algo.learning_rate=inf", "finite", "Fix:"]),
    (["algo.lr_schedule=[[0,1e-3],[100,inf]]"], ["algo.lr_schedule", "inf", "finite", "Fix:"]),
    (["env.solved_threshold=nan"], ["env.solved_threshold=nan", "Fix:"]),
    (["eval.video=true", "eval.video_num_envs=100"], ["eval.video_num_envs=100", "eval.num_envs=4", "Fix:"]),
    (["-m", "seed=range(0)"], ["seed='range(0)'", "has none", "Fix: pass e.g. seed='range(0,3)'"]),
    (["-m", "hydra/launcher=slurm"], ["hydra/launcher='slurm'", "sbatch and srun are not on PATH",
                                      "Fix: run the sweep on a SLURM login node, or pass hydra/launcher=local"]),
    (["-m", "hydra/launcher=local", "hydra.launcher.tasks_per_node=0"], ["hydra.launcher.tasks_per_node=0", "Fix:"]),
    # --- silently wrong values (issue 33 item 4): each trained, hung or wrote into the current directory ---
    (["+env.randomize.pole_length.range=[1,1]",
      "+trainer.curriculum.c={param: pole_length, levels: [[1,1],[0,1]], every_env_steps: 100}"],
     ["trainer.curriculum.c.levels[1]=[0, 1]", "low > 0", "Fix: use the range [0.25,1] instead"]),
    (["+env.randomize.pole_length.range=[1,1]",
      "+trainer.curriculum.c={param: pole_length, levels: [[1,1]], metric: eval/success_rate, threshold: 5}"],
     ["trainer.curriculum.c.threshold=5", "a rate in [0, 1]", "Fix: pass trainer.curriculum.c.threshold=0.8"]),
    (["trainer.stop_on=[{metric: eval/success_rate, op: '>=', value: 5}]"],
     ["trainer.stop_on[0].value=5", "a rate in [0, 1]",
      "Fix: pass trainer.stop_on=[{metric: eval/success_rate, op: '>=', value: 0.9}]"]),
    (["env=push_cube", "+env.randomize.cube_mass.range=[1,1e30]"],
     ["env.randomize.cube_mass.range=[1, 1e+30]", "up to x100", "Fix: pass env.randomize.cube_mass.range=[1,25]"]),
    (["+env.randomize.pole_length={range: [0.5, 1000], scale: absolute}"],
     ["env.randomize.pole_length.range=[0.5, 1000]", "up to x100", "(high <= 50)", "Fix: use the range [0.5,12.5]"]),
    (["env.obs_noise=1e30"], ["env.obs_noise=1e+30", "in [0, 100]", "Fix:"]),
    (["env.obs_noise={state: 1e30}"], ["env.obs_noise.state=1e+30", "in [0, 100]", "Fix: pass env.obs_noise.state="]),
    (["env.action_repeat=1e6"], ["env.action_repeat=1000000.0", "in [1, 100]", "Fix:"]),
    (["env.action_delay=1e9"], ["env.action_delay=1000000000.0", "in [0, 100]", "Fix:"]),
    (["policy.action_chunk=2", "policy.chunk_execute=3"],
     ["policy.chunk_execute=3", "[1, action_chunk=2]", "Fix: pass policy.chunk_execute=2"]),
    (["policy.action_chunk=2", "policy.chunk_execute=0"], ["policy.chunk_execute=0", ">= 1", "Fix:"]),
    (["policy.action_chunk=0"], ["policy.action_chunk=0", ">= 1", "Fix: pass policy.action_chunk=1"]),
    (["policy=actor_critic_rnn", "policy.action_chunk=4"],
     ["policy.action_chunk=4", "feedforward", "Fix: pass policy.action_chunk=1, or policy=actor_critic"]),
    (["algo=sac", "env=push_cube", "policy.action_chunk=4"],
     ["policy.action_chunk=4", "off-policy", "Fix: pass policy.action_chunk=1, or algo=ppo"]),
    (["hydra.run.dir=."], ["hydra.run.dir='.'", "the current directory", "Fix: pass hydra.run.dir=outputs/my_run"]),
    (["-m", "hydra.sweep.subdir=.", "seed=1,2"],
     ["hydra.sweep.subdir='.'", "differs per job", "Fix: pass hydra.sweep.subdir='${hydra.job.num}'"]),
]


# The fast tier (-m "not slow") runs one case per kind of mistake: a config group, the override syntax, an unknown,
# misspelt or moved key, a type, a bound, a non-finite number, a cross-key or build-time check, a file, a sweep.
# The other cases are the same checks on further keys and run in the slow tier.
FAST_TIER = {
    "algo=nonexistent", "algo.learning_rate=[", "num_envs=512", "algo.foo=1", "algo.learning_rat=1e-3", "seed=abc",
    "algo.clip_coef=-1", "algo.clip_coef=inf", "algo=grpo algo.group_size=3", "env=gym env.id=CartPol-v1",
    "trainer.resume=/nonexistent/last.pt", "-m seed=range(0)",
}
CASES = representatives(FAST_TIER, {" ".join(overrides): (overrides, fragments) for overrides, fragments in BAD_INPUTS})


def _check_one_line(code: int, stderr: str, fragments: list[str], run_dir) -> None:
    lines = stderr.strip().splitlines()
    assert code == 2, stderr
    assert len(lines) == 1 and lines[0].startswith("embodirl-train: error: "), stderr
    for text in fragments:
        assert text in lines[0], lines[0]
    assert ".algo.algo." not in lines[0] and "algo.policy" not in lines[0] and "denv.id" not in lines[0]
    assert "object at 0x" not in lines[0] and "please report it" not in lines[0]
    assert not (run_dir / "metrics.jsonl").exists()


def _args(overrides: list[str], tmp_path) -> list[str]:
    """``TINY``, the case's overrides and a run (or sweep) directory under ``tmp_path``; flags (``-m``) first."""
    flags = [o for o in overrides if o.startswith("-")]
    rest = [o for o in overrides if not o.startswith("-")]
    key = "hydra.sweep.dir" if "-m" in flags else "hydra.run.dir"
    own = [] if any(o.startswith(f"{key}=") for o in rest) else [f"{key}={tmp_path / 'run'}"]
    return [*flags, *TINY, *rest, *own]


def test_the_fast_tier_names_cases_of_the_table():
    assert {" ".join(overrides) for overrides, _ in BAD_INPUTS} >= FAST_TIER


@pytest.mark.parametrize(("overrides", "fragments"), CASES)
def test_bad_input_gives_one_line_and_exit_2_before_training(cli, tmp_path, monkeypatch, overrides, fragments):
    monkeypatch.chdir(tmp_path)  # a default run directory (outputs/...) lands here, never in the repository
    if any("not on PATH" in f for f in fragments):  # off a login node: hide a SLURM this machine may have (CI's)
        kept = [d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "sbatch").exists()]
        monkeypatch.setenv("PATH", os.pathsep.join(kept))
    result = cli("embodirl-train", _args(overrides, tmp_path))
    _check_one_line(result.code, result.err, fragments, tmp_path / "run")


@pytest.mark.parametrize("case", ["algo=nonexistent", pytest.param("algo.clip_coef=-1", marks=pytest.mark.slow)])
def test_the_console_script_gives_the_same_line(tmp_path, case):
    overrides, fragments = next((o, f) for o, f in BAD_INPUTS if o == [case])
    result = run_cli("embodirl-train", _args(overrides, tmp_path), cwd=tmp_path, timeout=90)
    assert "Traceback" not in result.stderr
    _check_one_line(result.returncode, result.stderr, fragments, tmp_path / "run")


def test_a_batch_larger_than_the_rollout_is_named_with_its_effective_size(cli, tmp_path):
    result = cli("embodirl-train", [*TINY, "algo.minibatch_size=100000", f"hydra.run.dir={tmp_path / 'run'}"])
    assert result.code == 0, result.err
    assert "algo.minibatch_size=100000 exceeds the rollout of 128 transitions" in result.out + result.err


def _followed(line: str) -> list[str]:
    """The overrides after "Fix: pass" in ``line`` (up to a parenthesis or ", or")."""
    found = re.search(r"Fix: pass (.+?)(?: \(|, or |$)", line)
    assert found, line
    return found[1].split()


@pytest.mark.parametrize("case", representatives(  # a moved key and a misspelt one stand for the rest
    ["num_envs=512", "algo.learning_rat=1e-3"],
    {case: case for case in ["num_envs=512", "lr=1e-3", "num_thread=2", "algo=PPO", "algo.learning_rat=1e-3",
                             "experiment=ppo_pushcube"]}))
def test_a_suggested_fix_is_accepted_when_followed(cli, tmp_path, case):
    from embodirl.config.run import check_run_config

    result = cli("embodirl-train", _args([case], tmp_path))
    fix = _followed(result.err.strip())
    assert case not in fix  # never the same input again
    check_run_config(compose_config([*TINY, *fix]))  # composes and passes every schema


def test_experiment_sweep_and_debug_are_chosen_without_a_plus_and_the_old_plus_still_works(cli):
    plain = cli("embodirl-train", ["experiment=ppo_push_cube", "trainer=debug", "--cfg", "job"])
    old = cli("embodirl-train", ["+experiment=ppo_push_cube", "trainer=debug", "+debug=trainer", "--cfg", "job"])
    assert plain.code == old.code == 0, plain.err + old.err
    recipe_envs = compose_config(["experiment=ppo_push_cube"]).env.num_envs
    assert plain.out == old.out and "total_env_steps: 16384" in plain.out and f"num_envs: {recipe_envs}" in plain.out
    for sweep in ("sweep=seeds", "+sweep=seeds"):
        result = cli("embodirl-train", [sweep, "--cfg", "hydra"])
        assert result.code == 0 and "mode: MULTIRUN" in result.out, result.err


@pytest.mark.slow
def test_the_dict_form_of_randomize_and_curriculum_trains(cli, tmp_path):
    """``env.randomize={...}`` and ``trainer.curriculum={...}`` were refused ("it is a key of env=push_cube")."""
    curriculum = "trainer.curriculum={c: {param: pole_length, levels: [[1, 1], [0.5, 1.5]], every_env_steps: 128}}"
    result = cli("embodirl-train", [*TINY, "env.randomize={pole_length: {range: [0.5, 1.5]}}", curriculum,
                                    f"hydra.run.dir={tmp_path}"])
    assert result.code == 0, result.err
    stored = (tmp_path / ".hydra" / "config.yaml").read_text()
    assert "pole_length:" in stored and "every_env_steps: 128" in stored
    misspelt = cli("embodirl-train", [*TINY, "env.randomize={pole_lenght: {range: [0.5, 1.5]}}",
                                      f"hydra.run.dir={tmp_path / 'bad'}"])
    _check_one_line(misspelt.code, misspelt.err, ["env.randomize.pole_lenght=", "pole_length"], tmp_path / "bad")


@pytest.mark.skipif(importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is not None,
                    reason="the optuna extra is installed here")
def test_a_sweep_whose_plugin_is_missing_names_the_extra(cli, tmp_path):
    result = cli("embodirl-train", ["sweep=optuna_lr", f"hydra.sweep.dir={tmp_path}"])
    _check_one_line(result.code, result.err, ["hydra/sweeper=optuna", "sweep=optuna_lr selects it",
                                              'Fix: pip install "embodirl[optuna]"'], tmp_path)
    assert "hydra/sweeper=basic" not in result.err  # which then failed with a ConfigKeyError


def test_eval_says_env_names_a_second_env_for_an_export_only(cli, tmp_path):
    from embodirl.config.run import check_evaluate_config

    result = cli("embodirl-eval", [f"run={tmp_path}", "env=push_cube"])
    line = result.err.strip()
    assert result.code == 2 and len(line.splitlines()) == 1, result.err
    assert "env='push_cube' is invalid: expected keys of the checkpoint's env" in line
    assert ("Fix: drop env=push_cube (or set a key, e.g. env.num_envs=8), or pass export=<run>/export/onnx to run "
            "the run's export in push_cube") in line
    check_evaluate_config(compose_config([f"run={tmp_path}", "env.num_envs=2"], "eval"))  # the fix, followed


@pytest.mark.parametrize(("args", "fix"), [(["--learning-rate", "1e-3"], "algo.learning_rate=1e-3"),
                                           (["--num-envs=64"], "env.num_envs=64")])
def test_a_cleanrl_style_flag_names_the_key_to_pass(cli, tmp_path, args, fix):
    """Was argparse's usage and "unrecognized arguments: --learning-rate"."""
    from embodirl.config.run import check_run_config

    result = cli("embodirl-train", [*args, f"hydra.run.dir={tmp_path}"])
    _check_one_line(result.code, result.err, [f"{args[0]} is not an option", f"Fix: pass {fix}"], tmp_path)
    check_run_config(compose_config([*TINY, *_followed(result.err)]))


def test_m_after_an_override_says_it_goes_first(cli, tmp_path):
    from hydra._internal.utils import get_args_parser

    args = ["experiment=ppo_cartpole", "-m", "seed=0,1", f"hydra.sweep.dir={tmp_path}"]
    result = cli("embodirl-train", args)
    _check_one_line(result.code, result.err, ["-m goes first", "Fix: embodirl-train -m experiment=ppo_cartpole"],
                    tmp_path)
    command = shlex.split(result.err.split("Fix: ")[1])
    parsed, unknown = get_args_parser().parse_known_args(command[1:])  # the fix, as Hydra reads it
    assert parsed.multirun and not unknown and parsed.overrides == args[:1] + args[2:]


def test_report_answers_a_misspelt_option_with_the_real_one(capsys):
    from embodirl.cli import report

    with pytest.raises(SystemExit) as stopped:
        report.main(["--metrics"])
    line = capsys.readouterr().err.strip()
    assert stopped.value.code == 2 and len(line.splitlines()) == 1 and "usage:" not in line, line
    assert "--metrics is not an option of embodirl-report (did you mean --metric KEY" in line
    assert "Fix: pass --metric KEY instead" in line


@pytest.mark.slow
def test_a_refused_continuation_prints_the_command_that_resumes_and_resume_shortcut_works(cli, tmp_path):
    """``hydra.run.dir=<a sweep job>`` without the job's overrides: the line names ``resume=<job>`` and the job's
    stored overrides (was: "or trainer.allow_config_change=true", which a changed network then refuses)."""
    from embodirl.cli.train import expand_resume

    sweep = cli("embodirl-train", ["-m", *TINY, "algo.learning_rate=1e-3", f"hydra.sweep.dir={tmp_path}"])
    assert sweep.code == 0, sweep.err
    job = tmp_path / "0"
    refused = cli("embodirl-train", [*TINY, f"hydra.run.dir={job}"])
    _check_one_line(refused.code, refused.err, ["algo.learning_rate 0.001 -> ", f"embodirl-train resume={job}",
                                                "algo.learning_rate=0.001", f"hydra.run.dir={job})"], tmp_path)
    command = shlex.split(refused.err.split("(that is: ")[1].split(");")[0])
    assert expand_resume([f"resume={job}"]) == command[1:]  # the shortcut runs the printed command
    steps = json.loads((job / "metrics.jsonl").read_text().splitlines()[-1])["env_steps"]
    shortcut = cli("embodirl-train", [f"resume={job}", f"trainer.total_env_steps={steps + 256}"])  # followed
    assert shortcut.code == 0, shortcut.err
    assert json.loads((job / "metrics.jsonl").read_text().splitlines()[-1])["env_steps"] == steps + 256
    missing = cli("embodirl-train", [f"resume={tmp_path / 'nothing'}"])
    _check_one_line(missing.code, missing.err, ["resume=", "a run directory of embodirl-train",
                                                "Fix: pass resume=<run dir>"], tmp_path / "nothing")


REACH = '''
import gymnasium as gym
import numpy as np


class PointMass1D(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, {}
'''


@pytest.mark.slow
def test_an_own_module_that_registers_no_id_gets_the_register_line(cli, tmp_path, monkeypatch):
    """Was: "a registered gymnasium environment id ... Fix: List the registered ids"."""
    (tmp_path / "i32_reach.py").write_text(REACH)
    monkeypatch.syspath_prepend(str(tmp_path))
    args = [*TINY, "env=gym", f"hydra.run.dir={tmp_path / 'run'}"]
    try:
        result = cli("embodirl-train", [*args, "env.id=i32_reach:PointMass1D"])
        _check_one_line(result.code, result.err, ["it registers no id", "Fix: add gymnasium.register("
                                                  "\"PointMass1D-v0\", entry_point=\"i32_reach:PointMass1D\""],
                        tmp_path / "run")
        line = result.err.split("Fix: add ")[1]
        register, _, rest = line.partition(" to i32_reach and pass ")
        (tmp_path / "i32_reach.py").write_text(f"{REACH}\nimport gymnasium\n\n{register}\n")  # the fix, followed
        del sys.modules["i32_reach"]
        followed = cli("embodirl-train", [*args, rest.strip().rstrip(".")])
        assert followed.code == 0, followed.err
    finally:
        sys.modules.pop("i32_reach", None)
