"""The console scripts: entry points only (``embodirl-train``, ``-eval``, ``-export``, ``-report``, ``-bench``)."""

from embodirl.cli.process import install_interrupt_hook

install_interrupt_hook()  # before a script's own imports (Hydra, torch): a Ctrl-C during them is one line
