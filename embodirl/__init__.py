"""embodirl: Hydra-composed reinforcement learning for embodied AI.

Importing the package changes nothing outside it: the console scripts (:mod:`embodirl.cli`) are what defer
``torch._dynamo`` for an eager run (:mod:`embodirl.accel.deferred_dynamo`), so a library user's torch is torch.
"""

__version__ = "0.1.0"
