"""embodirl: Hydra-composed reinforcement learning for embodied AI."""

from embodirl.accel import deferred_dynamo

deferred_dynamo.install()

__version__ = "0.1.0"
