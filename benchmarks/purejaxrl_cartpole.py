"""Same-machine peer: PureJaxRL's PPO on gymnax CartPole-v1, timed to "solved".

The network, the CartPole-v1 hyperparameters and the maths (rollout, GAE, clipped losses, Adam with
global-norm clipping and the linear learning-rate anneal) are PureJaxRL's ``purejaxrl/ppo.py`` and the
two wrappers it uses from ``purejaxrl/wrappers.py``, copied from github.com/luchris429/purejaxrl at
commit 31756b197773a52db763fdbe6d635e4b46522a73 (both files last changed in 5343613b07b3bc543c49695df601fc40f5ec3062).
Copyright 2023 Chris Lu, licensed under the Apache License 2.0
(http://www.apache.org/licenses/LICENSE-2.0). Modifications: the single ``jax.lax.scan`` over all updates
is split into a jitted chunk of updates (``--eval-freq`` env steps) run from a Python loop, with a jitted
deterministic evaluation after each chunk; the ``DEBUG`` print callback is dropped; the wrappers are
inlined because ``purejaxrl/wrappers.py`` also imports brax and navix; and gymnax >= 1.0's separate
``terminated`` and ``truncated`` are joined into the single ``done`` of the gymnax 0.0.x API that PureJaxRL
was written for (as there, an episode cut at 500 steps is not bootstrapped).

Standalone script, run with its own venv (not embodirl's):
    python3 -m venv /work/jaxvenv
    /work/jaxvenv/bin/pip install "jax[cpu]" flax optax distrax gymnax
    /work/jaxvenv/bin/python benchmarks/purejaxrl_cartpole.py --seeds 0 1 2 --out purejaxrl.json
written against jax/jaxlib 0.10.2, flax 0.12.8, optax 0.2.8, distrax 0.1.9, gymnax 1.0.1, chex 0.1.92,
numpy 2.4.6 (the JSON records the versions of the run).

"Solved" is embodirl's default criterion (``conf/train.yaml`` ``eval``: every 16,384 env steps, 20
evaluation envs, 20 deterministic episodes, always from the same seeded starts): after every
``--eval-freq`` env steps the greedy policy (argmax of the logits) plays one episode on each of
``--eval-episodes`` envs, and the run is solved once their mean return is >= ``--threshold``. The
evaluation time is INCLUDED in the wall time. Like ``sb3_cartpole.py``, the mean return of the last 100
finished training episodes >= threshold is reported as criterion (a), for information; training stops at
(b), the evaluation, or at the budget.

Timings, each reported apart:
  import_s          importing jax, flax, optax, distrax and gymnax;
  compile_s         ahead-of-time ``.lower().compile()`` of the init, the chunk of updates and the
                    evaluation (once per process: every seed reuses them), never in a loop time;
  build_s           running the compiled init (network, optimiser, env reset) for a seed;
  b_wall_s          the training loop from its first chunk to the solving evaluation, evaluations included;
  proc_to_solved_s  process start (Linux ``/proc``; else the script's first line) to the first seed's solve.

Threads: ``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1`` is set before jax
is imported (with ``--threads 1``, the default). XLA still starts idle helper threads, so
``--cpu N`` additionally pins the process (and every thread it starts) to CPU N with
``os.sched_setaffinity``, as ``taskset -c N`` would; ``benchmarks/race.py`` pins every contender alike.

``--xla-cache DIR`` keeps the compiled programs in jax's persistent cache: ``compile_s`` is then the time
to load them on a second run with the same DIR (``race.py --xla-cache DIR`` gives both PureJaxRL contenders
one). ``--set KEY=VALUE ...`` replaces entries of PureJaxRL's CONFIG (the network and the maths stay PureJaxRL's):
``benchmarks/race.py`` runs it at embodirl's settings this way (its ``purejaxrl-embodirl`` contender).

The budget is PureJaxRL's ``TOTAL_TIMESTEPS`` (5e5, also the learning-rate anneal's horizon), rounded
down to whole chunks: with the default 16,384-step chunks, 30 chunks (491,520 steps), leaving out the last
16 updates, at under 2 % of the initial learning rate.
"""
import argparse
import importlib.metadata
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from typing import NamedTuple

T_SCRIPT = time.perf_counter()

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
p.add_argument("--threads", type=int, default=1,
               help="1 = single-threaded XLA CPU (XLA_FLAGS); more = XLA's default thread pool")
p.add_argument("--cpu", type=int, default=None, help="pin the process to this CPU (as taskset -c)")
p.add_argument("--eval-freq", type=int, default=16384,  # embodirl's eval.every_env_steps (tests/benchmarks)
               help="env steps between evaluations (a multiple of NUM_ENVS*NUM_STEPS = 512); default: embodirl's "
                    "eval.every_env_steps")
p.add_argument("--eval-episodes", type=int, default=20,
               help="deterministic episodes per evaluation, one per evaluation env")
p.add_argument("--threshold", type=float, default=475.0)
p.add_argument("--out", default="purejaxrl_cartpole.json")
p.add_argument("--xla-cache", default=None, metavar="DIR",
               help="keep XLA's compiled programs in DIR (jax's persistent compilation cache): a second run "
                    "with the same DIR loads them instead of compiling; PureJaxRL itself sets no cache")
p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
               help="replace entries of PureJaxRL's CONFIG, VALUE as JSON (a bare word is a string): "
                    "--set NUM_ENVS=256 NUM_STEPS=32 ANNEAL_LR=false ACTIVATION=relu")
args = p.parse_args()

# PureJaxRL's CartPole-v1 config (purejaxrl/ppo.py __main__), DEBUG dropped.
CONFIG = {
    "LR": 2.5e-4,
    "NUM_ENVS": 4,
    "NUM_STEPS": 128,
    "TOTAL_TIMESTEPS": 5e5,
    "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 4,
    "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2,
    "ENT_COEF": 0.01,
    "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh",
    "ENV_NAME": "CartPole-v1",
    "ANNEAL_LR": True,
}
for item in args.set:
    key, _, value = item.partition("=")
    if key not in CONFIG or not value:
        p.error(f"--set {item}: expected KEY=VALUE with KEY one of {', '.join(CONFIG)}; try --set NUM_ENVS=256")
    try:
        CONFIG[key] = json.loads(value)
    except json.JSONDecodeError:
        CONFIG[key] = value
if CONFIG["ACTIVATION"] not in ("tanh", "relu"):
    p.error(f"--set ACTIVATION={CONFIG['ACTIVATION']}: PureJaxRL's network knows tanh and relu; try ACTIVATION=relu")
STEPS_PER_UPDATE = CONFIG["NUM_ENVS"] * CONFIG["NUM_STEPS"]
if args.eval_freq <= 0 or args.eval_freq % STEPS_PER_UPDATE:
    whole = -(-p.get_default("eval_freq") // STEPS_PER_UPDATE) * STEPS_PER_UPDATE  # the default, in whole updates
    p.error(f"--eval-freq {args.eval_freq}: must be a positive multiple of NUM_ENVS*NUM_STEPS = "
            f"{STEPS_PER_UPDATE} (one PureJaxRL update); try --eval-freq {whole}")
if args.eval_episodes <= 0 or args.threads <= 0:
    p.error("--eval-episodes and --threads must be positive integers")
UPDATES_PER_CHUNK = args.eval_freq // STEPS_PER_UPDATE

# Thread and CPU settings must be in place before jax is imported (XLA reads its flags once).
if args.cpu is not None:
    os.sched_setaffinity(0, {args.cpu})
if args.threads == 1:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
                               " intra_op_parallelism_threads=1").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
t_imp = time.perf_counter()
# E402 is wrong for these imports: they must follow the XLA_FLAGS lines (and the timer) above.
import distrax  # noqa: E402
import flax  # noqa: E402
import flax.linen as nn  # noqa: E402
import gymnax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax.linen.initializers import constant, orthogonal  # noqa: E402
from flax.training.train_state import TrainState  # noqa: E402

IMPORT_S = time.perf_counter() - t_imp
if args.xla_cache:
    jax.config.update("jax_compilation_cache_dir", args.xla_cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # cache every program, small ones too
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def process_age_s():
    """Seconds since this process started (Linux /proc), else since the script's first line."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - T_SCRIPT


# ---- purejaxrl/wrappers.py (FlattenObservationWrapper, LogWrapper), unchanged but for the jit decorators,
# redundant inside the jitted functions below.
class GymnaxWrapper:
    """Base class for Gymnax wrappers."""

    def __init__(self, env):
        self._env = env

    # provide proxy access to regular attributes of wrapped object
    def __getattr__(self, name):
        return getattr(self._env, name)


class FlattenObservationWrapper(GymnaxWrapper):
    """Flatten the observations of the environment."""

    def observation_space(self, params):
        space = self._env.observation_space(params)
        return gymnax.environments.spaces.Box(low=space.low, high=space.high,
                                              shape=(np.prod(space.shape),), dtype=space.dtype)

    def reset(self, key, params=None):
        obs, state = self._env.reset(key, params)
        return jnp.reshape(obs, (-1,)), state

    def step(self, key, state, action, params=None):
        # gymnax >= 1.0 returns terminated and truncated apart; PureJaxRL was written for gymnax 0.0.x,
        # whose single ``done`` was their union (the time limit included), so that union is restored here.
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        done = jnp.logical_or(terminated, truncated)
        return jnp.reshape(obs, (-1,)), state, reward, done, info


@flax.struct.dataclass
class LogEnvState:
    env_state: object
    episode_returns: float
    episode_lengths: int
    returned_episode_returns: float
    returned_episode_lengths: int
    timestep: int


class LogWrapper(GymnaxWrapper):
    """Log the episode returns and lengths."""

    def reset(self, key, params=None):
        obs, env_state = self._env.reset(key, params)
        return obs, LogEnvState(env_state, 0, 0, 0, 0, 0)

    def step(self, key, state, action, params=None):
        obs, env_state, reward, done, info = self._env.step(key, state.env_state, action, params)
        new_episode_return = state.episode_returns + reward
        new_episode_length = state.episode_lengths + 1
        state = LogEnvState(
            env_state=env_state,
            episode_returns=new_episode_return * (1 - done),
            episode_lengths=new_episode_length * (1 - done),
            returned_episode_returns=state.returned_episode_returns * (1 - done)
            + new_episode_return * done,
            returned_episode_lengths=state.returned_episode_lengths * (1 - done)
            + new_episode_length * done,
            timestep=state.timestep + 1,
        )
        info["returned_episode_returns"] = state.returned_episode_returns
        info["returned_episode_lengths"] = state.returned_episode_lengths
        info["timestep"] = state.timestep
        info["returned_episode"] = done
        return obs, state, reward, done, info


# ---- purejaxrl/ppo.py
class ActorCritic(nn.Module):
    action_dim: Sequence[int]
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x):
        activation = nn.relu if self.activation == "relu" else nn.tanh
        actor_mean = nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(x)
        actor_mean = activation(actor_mean)
        actor_mean = nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(actor_mean)
        actor_mean = activation(actor_mean)
        actor_mean = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01),
                              bias_init=constant(0.0))(actor_mean)
        pi = distrax.Categorical(logits=actor_mean)

        critic = nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(x)
        critic = activation(critic)
        critic = nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(critic)
        critic = activation(critic)
        critic = nn.Dense(1, kernel_init=orthogonal(1.0), bias_init=constant(0.0))(critic)

        return pi, jnp.squeeze(critic, axis=-1)


class Transition(NamedTuple):
    done: jnp.ndarray
    action: jnp.ndarray
    value: jnp.ndarray
    reward: jnp.ndarray
    log_prob: jnp.ndarray
    obs: jnp.ndarray
    info: jnp.ndarray


def make_train(config):
    """PureJaxRL's ``make_train``, returning (init, update_step) instead of one scan over all updates."""
    config["NUM_UPDATES"] = config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]
    config["MINIBATCH_SIZE"] = config["NUM_ENVS"] * config["NUM_STEPS"] // config["NUM_MINIBATCHES"]
    env, env_params = gymnax.make(config["ENV_NAME"])
    env = FlattenObservationWrapper(env)
    env = LogWrapper(env)
    network = ActorCritic(env.action_space(env_params).n, activation=config["ACTIVATION"])

    def linear_schedule(count):
        frac = (1.0 - (count // (config["NUM_MINIBATCHES"] * config["UPDATE_EPOCHS"]))
                / config["NUM_UPDATES"])
        return config["LR"] * frac

    # Built once, outside init (PureJaxRL builds it inside train()), so that every init returns a
    # TrainState of the same static structure and one compiled chunk serves them all.
    if config["ANNEAL_LR"]:
        tx = optax.chain(optax.clip_by_global_norm(config["MAX_GRAD_NORM"]),
                         optax.adam(learning_rate=linear_schedule, eps=1e-5))
    else:
        tx = optax.chain(optax.clip_by_global_norm(config["MAX_GRAD_NORM"]),
                         optax.adam(config["LR"], eps=1e-5))

    def init(rng):
        # INIT NETWORK
        rng, _rng = jax.random.split(rng)
        init_x = jnp.zeros(env.observation_space(env_params).shape)
        network_params = network.init(_rng, init_x)
        train_state = TrainState.create(apply_fn=network.apply, params=network_params, tx=tx)

        # INIT ENV
        rng, _rng = jax.random.split(rng)
        reset_rng = jax.random.split(_rng, config["NUM_ENVS"])
        obsv, env_state = jax.vmap(env.reset, in_axes=(0, None))(reset_rng, env_params)
        rng, _rng = jax.random.split(rng)
        return (train_state, env_state, obsv, _rng)

    return init, make_update_step(config, env, env_params, network), network, env_params


def make_update_step(config, env, env_params, network):
    """PureJaxRL's ``_update_step``: one rollout of NUM_STEPS x NUM_ENVS, GAE, then the epochs."""

    def _update_step(runner_state, unused):
        # COLLECT TRAJECTORIES
        def _env_step(runner_state, unused):
            train_state, env_state, last_obs, rng = runner_state

            # SELECT ACTION
            rng, _rng = jax.random.split(rng)
            pi, value = network.apply(train_state.params, last_obs)
            action = pi.sample(seed=_rng)
            log_prob = pi.log_prob(action)

            # STEP ENV
            rng, _rng = jax.random.split(rng)
            rng_step = jax.random.split(_rng, config["NUM_ENVS"])
            obsv, env_state, reward, done, info = jax.vmap(
                env.step, in_axes=(0, 0, 0, None))(rng_step, env_state, action, env_params)
            transition = Transition(done, action, value, reward, log_prob, last_obs, info)
            runner_state = (train_state, env_state, obsv, rng)
            return runner_state, transition

        runner_state, traj_batch = jax.lax.scan(_env_step, runner_state, None, config["NUM_STEPS"])

        # CALCULATE ADVANTAGE
        train_state, env_state, last_obs, rng = runner_state
        _, last_val = network.apply(train_state.params, last_obs)
        advantages, targets = _calculate_gae(config, traj_batch, last_val)

        # UPDATE NETWORK
        update_state = (train_state, traj_batch, advantages, targets, rng)
        update_state, _loss_info = jax.lax.scan(
            make_update_epoch(config, network), update_state, None, config["UPDATE_EPOCHS"])
        train_state = update_state[0]
        # Only what criterion (a) needs leaves the device.
        metric = {k: traj_batch.info[k] for k in ("returned_episode_returns", "returned_episode")}
        rng = update_state[-1]
        runner_state = (train_state, env_state, last_obs, rng)
        return runner_state, metric

    return _update_step


def _calculate_gae(config, traj_batch, last_val):
    def _get_advantages(gae_and_next_value, transition):
        gae, next_value = gae_and_next_value
        done, value, reward = transition.done, transition.value, transition.reward
        delta = reward + config["GAMMA"] * next_value * (1 - done) - value
        gae = delta + config["GAMMA"] * config["GAE_LAMBDA"] * (1 - done) * gae
        return (gae, value), gae

    _, advantages = jax.lax.scan(_get_advantages, (jnp.zeros_like(last_val), last_val),
                                 traj_batch, reverse=True, unroll=16)
    return advantages, advantages + traj_batch.value


def make_loss_fn(config, network):
    """PureJaxRL's ``_loss_fn``: clipped surrogate, clipped value loss, entropy bonus."""

    def _loss_fn(params, traj_batch, gae, targets):
        # RERUN NETWORK
        pi, value = network.apply(params, traj_batch.obs)
        log_prob = pi.log_prob(traj_batch.action)

        # CALCULATE VALUE LOSS
        value_pred_clipped = traj_batch.value + (value - traj_batch.value).clip(
            -config["CLIP_EPS"], config["CLIP_EPS"])
        value_losses = jnp.square(value - targets)
        value_losses_clipped = jnp.square(value_pred_clipped - targets)
        value_loss = 0.5 * jnp.maximum(value_losses, value_losses_clipped).mean()

        # CALCULATE ACTOR LOSS
        ratio = jnp.exp(log_prob - traj_batch.log_prob)
        gae = (gae - gae.mean()) / (gae.std() + 1e-8)
        loss_actor1 = ratio * gae
        loss_actor2 = jnp.clip(ratio, 1.0 - config["CLIP_EPS"], 1.0 + config["CLIP_EPS"]) * gae
        loss_actor = -jnp.minimum(loss_actor1, loss_actor2)
        loss_actor = loss_actor.mean()
        entropy = pi.entropy().mean()

        total_loss = loss_actor + config["VF_COEF"] * value_loss - config["ENT_COEF"] * entropy
        return total_loss, (value_loss, loss_actor, entropy)

    return _loss_fn


def make_update_epoch(config, network):
    """PureJaxRL's ``_update_epoch``: one shuffle, NUM_MINIBATCHES gradient steps."""
    grad_fn = jax.value_and_grad(make_loss_fn(config, network), has_aux=True)

    def _update_minbatch(train_state, batch_info):
        traj_batch, advantages, targets = batch_info
        total_loss, grads = grad_fn(train_state.params, traj_batch, advantages, targets)
        train_state = train_state.apply_gradients(grads=grads)
        return train_state, total_loss

    def _update_epoch(update_state, unused):
        train_state, traj_batch, advantages, targets, rng = update_state
        rng, _rng = jax.random.split(rng)
        # Batching and Shuffling
        batch_size = config["MINIBATCH_SIZE"] * config["NUM_MINIBATCHES"]
        assert batch_size == config["NUM_STEPS"] * config["NUM_ENVS"], (
            "batch size must be equal to number of steps * number of envs")
        permutation = jax.random.permutation(_rng, batch_size)
        batch = (traj_batch, advantages, targets)
        batch = jax.tree_util.tree_map(lambda x: x.reshape((batch_size, *x.shape[2:])), batch)
        shuffled_batch = jax.tree_util.tree_map(lambda x: jnp.take(x, permutation, axis=0), batch)
        # Mini-batch Updates
        minibatches = jax.tree_util.tree_map(
            lambda x: jnp.reshape(x, [config["NUM_MINIBATCHES"], -1, *x.shape[1:]]),
            shuffled_batch)
        train_state, total_loss = jax.lax.scan(_update_minbatch, train_state, minibatches)
        update_state = (train_state, traj_batch, advantages, targets, rng)
        return update_state, total_loss

    return _update_epoch


# ---- benchmark harness (not PureJaxRL's)
def make_evaluate(network, env_params, num_envs):
    """Deterministic evaluation: the greedy policy plays one episode on each of ``num_envs`` envs.

    The episodes start from resets seeded by ``rng`` (the same every evaluation, as embodirl's);
    an env's return stops counting at its first ``done`` (gymnax auto-resets after it).
    """
    env = FlattenObservationWrapper(gymnax.make(CONFIG["ENV_NAME"])[0])

    def evaluate(params, rng):
        reset_rng = jax.random.split(rng, num_envs)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(reset_rng, env_params)
        alive = jnp.ones(num_envs, dtype=bool)
        returns = jnp.zeros(num_envs)

        def running(carry):
            t, alive = carry[0], carry[3]
            return jnp.logical_and(t < env_params.max_steps_in_episode, alive.any())

        def step(carry):
            t, obs, state, alive, returns, rng = carry
            pi, _ = network.apply(params, obs)
            rng, _rng = jax.random.split(rng)
            obs, state, reward, done, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(_rng, num_envs), state, pi.mode(), env_params)
            returns = returns + reward * alive
            return t + 1, obs, state, jnp.logical_and(alive, jnp.logical_not(done)), returns, rng

        carry = jax.lax.while_loop(running, step, (0, obs, state, alive, returns, rng))
        return carry[4].mean()

    return evaluate


def compile_all():
    """Ahead-of-time compiles init, one chunk of updates and the evaluation; returns them and the seconds."""
    t = time.perf_counter()
    init, update_step, network, env_params = make_train(dict(CONFIG))

    def chunk(runner_state):
        return jax.lax.scan(update_step, runner_state, None, UPDATES_PER_CHUNK)

    key = jax.random.PRNGKey(0)
    # PureJaxRL's one scan promotes LogWrapper's integer zeros to the float returns once; a chunk called
    # again and again needs its carry in those types from the start, so init casts to them.
    carry = jax.eval_shape(chunk, jax.eval_shape(init, key))[0]

    def init_promoted(rng):
        return jax.tree_util.tree_map(lambda x, s: jnp.asarray(x, s.dtype), init(rng), carry)

    init_c = jax.jit(init_promoted).lower(key).compile()
    runner_state = jax.eval_shape(init_promoted, key)
    chunk_c = jax.jit(chunk, donate_argnums=0).lower(runner_state).compile()
    params = runner_state[0].params
    eval_c = jax.jit(make_evaluate(network, env_params, args.eval_episodes)).lower(params, key).compile()
    return init_c, chunk_c, eval_c, time.perf_counter() - t


def last100_solved(returns):
    """Criterion (a): the mean of the last 100 finished training episodes >= threshold."""
    last = returns[-100:]
    return len(last) == 100 and sum(last) / 100 >= args.threshold


def run(seed, init_c, chunk_c, eval_c):
    """Trains one seed chunk by chunk until the evaluation reaches the threshold or the budget ends."""
    t_b = time.perf_counter()
    runner_state = jax.block_until_ready(init_c(jax.random.PRNGKey(seed)))
    build_s = time.perf_counter() - t_b
    eval_key = jax.random.PRNGKey(seed + 10_000)
    num_chunks = int(CONFIG["TOTAL_TIMESTEPS"]) // STEPS_PER_UPDATE // UPDATES_PER_CHUNK
    returns, a, b, eval_s, steps, mean_r = [], None, None, 0.0, 0, None
    t0 = time.perf_counter()
    for i in range(num_chunks):
        runner_state, metric = chunk_c(runner_state)
        done = np.asarray(metric["returned_episode"])  # [updates, steps, envs], in time order
        returns.extend(np.asarray(metric["returned_episode_returns"])[done].tolist())
        steps = (i + 1) * args.eval_freq
        if a is None and last100_solved(returns):
            a = (time.perf_counter() - t0, steps, eval_s)
        te = time.perf_counter()
        mean_r = float(eval_c(runner_state[0].params, eval_key))
        eval_s += time.perf_counter() - te
        if mean_r >= args.threshold:
            b = (time.perf_counter() - t0, steps)
            print(f"solved: seed {seed} at {steps} env steps, {b[0]:.2f} s (eval return {mean_r:.1f} "
                  f">= {args.threshold:g})", flush=True)
            break
    wall = time.perf_counter() - t0
    return dict(
        seed=seed,
        a_wall_s=a and round(a[0], 3), a_steps=a and a[1], a_eval_s=a and round(a[2], 3),
        b_wall_s=b and round(b[0], 3), b_steps=b and b[1],
        proc_to_solved_s=b and round(process_age_s(), 3),
        total_wall_s=round(wall, 3), total_steps=steps, last_eval_return=mean_r,
        steps_per_s=round(steps / wall, 1),
        train_steps_per_s=round(steps / (wall - eval_s), 1),  # excluding eval time
        eval_s=round(eval_s, 3), n_evals=i + 1, build_s=round(build_s, 3),
    )


def median(rows, key):
    vals = [r[key] for r in rows if r[key] is not None]
    return statistics.median(vals) if vals else None


def main():
    init_c, chunk_c, eval_c, compile_s = compile_all()
    rows = []
    for s in args.seeds:
        rows.append(run(s, init_c, chunk_c, eval_c))
        print(json.dumps(rows[-1]), flush=True)
    keys = ["a_wall_s", "a_steps", "b_wall_s", "b_steps", "steps_per_s", "train_steps_per_s"]
    summary = dict(
        median={k: median(rows, k) for k in keys},
        solved_a=sum(r["a_steps"] is not None for r in rows),
        solved_b=sum(r["b_steps"] is not None for r in rows), n_seeds=len(rows),
        versions=dict({d: importlib.metadata.version(d) for d in
                       ("jax", "jaxlib", "flax", "optax", "distrax", "gymnax", "chex", "numpy")},
                      python=sys.version.split()[0]),
        threads=args.threads, cpu=args.cpu, xla_flags=os.environ.get("XLA_FLAGS", ""),
        budget=num_budget_steps(), eval_freq=args.eval_freq, eval_episodes=args.eval_episodes,
        threshold=args.threshold, import_s=round(IMPORT_S, 3), compile_s=round(compile_s, 3),
        first_proc_to_solved_s=rows[0]["proc_to_solved_s"],
        purejaxrl_config=CONFIG, purejaxrl_commit="31756b197773a52db763fdbe6d635e4b46522a73",
    )
    print(json.dumps({"summary": summary}), flush=True)
    with open(args.out, "w") as f:
        json.dump({"runs": rows, "summary": summary}, f, indent=2)


def num_budget_steps():
    """Env steps the loop may run: TOTAL_TIMESTEPS rounded down to whole chunks."""
    return int(CONFIG["TOTAL_TIMESTEPS"]) // STEPS_PER_UPDATE // UPDATES_PER_CHUNK * args.eval_freq


if __name__ == "__main__":
    main()
