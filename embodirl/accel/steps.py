"""Speed applied from outside to an algorithm's named step functions, the way LeanRL compiles CleanRL's
``update_main``: the algorithm writes plain eager functions over tensors and TensorDicts, and
:func:`accelerate_steps` replaces each of them on the instance by its compiled form.

An off-policy algorithm names its losses (``critic_loss``, ``actor_loss``): each is compiled whole
(``fullgraph=True, dynamic=False``) with its backward (AOTAutograd compiles the gradient graph with the forward),
while the optimizer steps, the delayed-actor schedule and the target update stay in the algorithm's eager
``train_step``. A step function must read no Python value that changes between calls (a counter, the buffer's
fill): such a value would be guarded on and recompile the function; tensors changed in place (running
normalisers, the temperature) are read at each call.
"""

from __future__ import annotations

from embodirl.accel.compile import Acceleration, compile_step

__all__ = ["accelerate_steps"]


def accelerate_steps(owner: object, names: tuple[str, ...], accel: Acceleration) -> None:
    """Replace each method ``owner.<name>`` by its compiled form when ``accel.compile`` (else leave it).

    Compilation happens at the first call (the build's warm-up makes one update before training).
    """
    if not accel.compile:
        return
    for name in names:
        setattr(owner, name, compile_step(getattr(owner, name), True))
