"""Divergence: an update whose metrics are far beyond any healthy run's fails the run (``trainer.divergence``,
:class:`~embodirl.config.training.DivergenceConfig`).

A NaN or infinite loss is caught where it is computed (:class:`~embodirl.errors.NonFiniteLossError`). A run
can also diverge with finite numbers: with ``algo.learning_rate=1e3`` CartPole's first PPO update moved
the policy by an approx-KL of 1e9 to 6e9 nats, its value loss reached 1e25 to 1e27 and the next update saw
a collapsed policy (entropy 0, approx-KL 0): the run went on to "complete". After each update the trainer
checks its metrics against these limits (each ``null`` turns its check off; ``trainer.divergence=null`` all):

* ``max_approx_kl`` (default 10 nats): ``diag/approx_kl``, the mean KL between the policy before and after
  the update, which PPO's and GRPO's clipped objectives keep small. Over every update of each run (recorded
  in ``tests/data/update_metrics.json``) the presets (PPO and GRPO on CartPole and PushCube, the
  UR10 arm, pixels, a recurrent policy, the gymnasium recipes) stayed below 0.03 in every update, Pendulum's
  below 0.06; runs that still learned at 15 to 50 times the preset learning rate below 0.2; learning rates
  of 10 to 1e3 gave 3e3 to 8e30 in their first update. Runs that had stopped learning sit between (Pendulum
  at ``algo.learning_rate=1e-2``, ten times its preset's, reached 72).
* ``max_value_loss`` (default 1e10): ``loss/value``, the critic's squared error. The presets stayed below
  4e3 (LunarLander, whose returns are in the hundreds); it grows with the square of the returns, so an env
  whose returns reach 1e5 needs a higher limit.
* ``max_distill_loss`` (default 1e6): ``loss/distill``, the student's error on the teacher's actions (a squared
  error of actions, or a cross-entropy), which starts near the teacher's mean squared action and falls. A student
  distilled at ``algo.learning_rate=1e3`` on push_cube reached 4e22 in its first update (1.95e11 was seen too).

One update beyond a limit is enough: after a blow-up the policy has often collapsed, and the next updates
look calm (approx-KL 0), so waiting for several would miss it. The run ends ``failed`` (exit status 3)
before the update is logged or saved, so ``checkpoints/last.pt`` keeps the last good state, as for a NaN
loss. A policy that collapses slowly (entropy to 0 at a modest approx-KL) is not caught.
"""

from __future__ import annotations

from collections.abc import Callable

from embodirl.config.training import DivergenceConfig
from embodirl.errors import DivergedError

__all__ = ["check_divergence"]

# What usually fixes each metric's blow-up.
_FIXES = {
    "diag/approx_kl": "lower algo.learning_rate{lr}, or pass algo.lr_schedule=adaptive_kl (it lowers the rate "
                      "when an update's approx-KL is high)",
    "loss/value": "lower algo.learning_rate{lr}, or pass algo.normalize_rewards=true, or lower algo.vf_coef",
    "loss/distill": "lower algo.learning_rate{lr} (the default is 1e-3)",
}


def check_divergence(limits: DivergenceConfig | None, metrics: dict[str, float], iteration: int,
                     learning_rate: Callable[[], float] | None = None) -> None:
    """Raise :class:`DivergedError` naming the first metric of ``metrics`` beyond its limit (NaN counts as beyond).

    Args:
        limits: The limits (None: nothing is checked).
        metrics: One update's metrics.
        iteration: The iteration of the update, for the message.
        learning_rate: Returns the optimizer's learning rate, named in the fix (called only then).
    """
    if limits is None:
        return
    for metric, (name, limit) in limits.limits().items():
        value = metrics.get(metric)
        if value is None or value <= limit:
            continue
        lr = f" (now {learning_rate():g})" if learning_rate is not None else ""
        raise DivergedError(
            f"training diverged in iteration {iteration}: {metric}={value:.3g} is beyond trainer.divergence.{name}="
            f"{limit:g} (healthy runs stay far below); training stopped before logging or saving this update, so "
            f"checkpoints/ holds only earlier states. Fix: {_FIXES[metric].format(lr=lr)}; "
            f"trainer.divergence.{name}=null turns this check off")
