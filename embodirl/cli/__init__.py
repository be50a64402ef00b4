"""The console scripts: entry points only (``embodirl-train``, ``-eval``, ``-export``, ``-report``, ``-bench``)."""

from embodirl.accel import deferred_dynamo
from embodirl.cli.process import install_interrupt_hook

install_interrupt_hook()  # before a script's own imports (Hydra, torch): a Ctrl-C during them is one line
# Before torch is imported: an eager run then never imports torch._dynamo. Here, in the scripts' process, and not
# in ``import embodirl``: it patches torch and tensordict internals, which is the scripts' choice, not a library's.
deferred_dynamo.install()
