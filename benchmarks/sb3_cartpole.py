"""Same-machine baseline: Stable-Baselines3 PPO on CartPole-v1 (RL-Zoo hyperparameters).

Standalone script, run with a separate venv that has stable-baselines3 + torch (CPU):
    /tmp/sb3venv/bin/python benchmarks/sb3_cartpole.py --seeds 0 1 2 --out sb3.json

Per seed, wall time is measured from just before ``model.learn()`` to:
  (a) the first time the mean return of the last 100 finished training episodes >= 475;
  (b) the first time a deterministic 10-episode evaluation (separate env, run every
      2048 env steps, its time INCLUDED in the wall time) has mean return >= 475.
Training stops at the step budget or, by default, once both (a) and (b) hold
(--stop-on b stops at (b) alone; (a) is then usually never reached, because the
deterministic policy solves CartPole well before the 100-episode training mean does).
No evaluations are run after (b) has been reached.
"""
import argparse
import json
import os
import statistics
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
p.add_argument("--budget", type=float, default=2e5, help="max env steps per seed")
p.add_argument("--schedule-steps", type=float, default=1e5,
               help="horizon of the linear lr/clip schedules (RL-Zoo n_timesteps)")
p.add_argument("--eval-freq", type=int, default=2048, help="env steps between evals")
p.add_argument("--threshold", type=float, default=475.0)
p.add_argument("--stop-on", choices=["b", "both"], default="both")
p.add_argument("--out", default="sb3_cartpole.json")
args = p.parse_args()

# Thread settings must be in place before torch is imported.
os.environ["OMP_NUM_THREADS"] = str(args.threads)
t_imp = time.perf_counter()
# E402 is wrong for these imports: they must follow the OMP_NUM_THREADS line (and the timer) above.
import gymnasium as gym  # noqa: E402 (after OMP_NUM_THREADS)
import stable_baselines3 as sb3  # noqa: E402 (after OMP_NUM_THREADS)
import torch  # noqa: E402 (after OMP_NUM_THREADS)
from stable_baselines3 import PPO  # noqa: E402 (after OMP_NUM_THREADS)
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402 (after OMP_NUM_THREADS)
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402 (after OMP_NUM_THREADS)
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402 (after OMP_NUM_THREADS)

IMPORT_S = time.perf_counter() - t_imp
torch.set_num_threads(args.threads)

# RL-Zoo hyperparams/ppo.yml, CartPole-v1 entry ("# Tuned").
ZOO = dict(n_envs=8, n_timesteps=1e5, policy="MlpPolicy", n_steps=32, batch_size=256,
           gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
           learning_rate="lin_0.001", clip_range="lin_0.2")


def linear(v0):
    """RL-Zoo ``lin_v0``: v0 * progress_remaining, decaying to 0 over --schedule-steps.

    SB3 computes progress_remaining against learn()'s total_timesteps (= budget), so it
    is rescaled to the Zoo horizon; past the horizon lr = clip = 0 (policy frozen)."""
    scale = args.budget / args.schedule_steps
    return lambda pr: v0 * max(0.0, 1.0 - (1.0 - pr) * scale)


class SolveTimer(BaseCallback):
    """Records wall time / env steps at criteria (a) and (b); stops per --stop-on."""

    def __init__(self, t0_ref, eval_env):
        super().__init__()
        self.t0_ref, self.eval_env = t0_ref, eval_env
        self.returns = []  # finished training-episode returns (Monitor 'episode' info)
        self.a = self.b = None
        self.eval_s = 0.0
        self.n_evals = 0

    def _on_step(self):
        for info in self.locals["infos"]:
            if "episode" in info:
                self.returns.append(info["episode"]["r"])
        last = self.returns[-100:]
        if self.a is None and len(last) == 100 and sum(last) / 100 >= args.threshold:
            self.a = (time.perf_counter() - self.t0_ref[0], self.num_timesteps, self.eval_s)
        # Eval every eval_freq env steps (2048 is a multiple of n_envs=8), until (b).
        if self.b is None and self.num_timesteps % args.eval_freq == 0:
            te = time.perf_counter()
            mean_r, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=10,
                                        deterministic=True)
            self.eval_s += time.perf_counter() - te
            self.n_evals += 1
            if mean_r >= args.threshold:
                self.b = (time.perf_counter() - self.t0_ref[0], self.num_timesteps)
        # Returning False ends learn().
        return not (self.b and (args.stop_on == "b" or self.a))


def run(seed):
    t_c = time.perf_counter()
    env = make_vec_env("CartPole-v1", n_envs=ZOO["n_envs"], seed=seed)  # DummyVecEnv
    eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=seed + 10_000)
    model = PPO(ZOO["policy"], env, n_steps=ZOO["n_steps"], batch_size=ZOO["batch_size"],
                gae_lambda=ZOO["gae_lambda"], gamma=ZOO["gamma"], n_epochs=ZOO["n_epochs"],
                ent_coef=ZOO["ent_coef"], learning_rate=linear(1e-3),
                clip_range=linear(0.2), seed=seed, device="cpu", verbose=0)
    build_s = time.perf_counter() - t_c
    t0 = [0.0]
    cb = SolveTimer(t0, eval_env)
    t0[0] = time.perf_counter()
    model.learn(total_timesteps=int(args.budget), callback=cb)
    wall = time.perf_counter() - t0[0]
    steps = model.num_timesteps
    return dict(
        seed=seed,
        a_wall_s=cb.a and round(cb.a[0], 2), a_steps=cb.a and cb.a[1],
        a_eval_s=cb.a and round(cb.a[2], 2),  # eval time included in a_wall_s
        b_wall_s=cb.b and round(cb.b[0], 2), b_steps=cb.b and cb.b[1],
        total_wall_s=round(wall, 2), total_steps=steps,
        steps_per_s=round(steps / wall, 1),
        train_steps_per_s=round(steps / (wall - cb.eval_s), 1),  # excluding eval time
        eval_s=round(cb.eval_s, 2), n_evals=cb.n_evals, build_s=round(build_s, 3),
    )


def median(rows, key):
    vals = [r[key] for r in rows if r[key] is not None]
    return statistics.median(vals) if vals else None


rows = []
for s in args.seeds:
    rows.append(run(s))
    print(json.dumps(rows[-1]), flush=True)

keys = ["a_wall_s", "a_steps", "b_wall_s", "b_steps", "steps_per_s", "train_steps_per_s"]
summary = dict(
    median={k: median(rows, k) for k in keys},
    solved_a=sum(r["a_steps"] is not None for r in rows),
    solved_b=sum(r["b_steps"] is not None for r in rows), n_seeds=len(rows),
    versions=dict(sb3=sb3.__version__, torch=torch.__version__, gymnasium=gym.__version__,
                  python=sys.version.split()[0]),
    threads=args.threads, budget=args.budget, schedule_steps=args.schedule_steps,
    eval_freq=args.eval_freq, stop_on=args.stop_on, import_s=round(IMPORT_S, 3),
    zoo_hyperparams=ZOO,
)
print(json.dumps({"summary": summary}), flush=True)
with open(args.out, "w") as f:
    json.dump({"runs": rows, "summary": summary}, f, indent=2)
