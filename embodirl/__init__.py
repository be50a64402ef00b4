"""embodirl: Hydra-composed reinforcement learning for embodied AI."""

__version__ = "0.1.0"
