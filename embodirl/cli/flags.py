"""Hydra command-line flags that embodirl's Hydra console scripts refuse before Hydra parses anything.

``--experimental-rerun FILE`` makes Hydra unpickle FILE, and unpickling runs whatever code the file names.
embodirl never writes that pickle (Hydra's ``PickleJobInfoCallback`` is not configured), so the flag could
only ever load a file from elsewhere. Hydra's parser is :mod:`argparse`, which also accepts the flag as
``--experimental-rerun=FILE`` and abbreviated to any unique prefix (``--exp FILE``): every form is refused.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["RERUN_FLAG", "refuse_rerun", "rerun_flag"]

RERUN_FLAG = "--experimental-rerun"


def rerun_flag(argv: Sequence[str]) -> str | None:
    """The flag as written in ``argv`` when it asks Hydra for ``--experimental-rerun`` (in any form argparse
    accepts), else None. No other Hydra option starts with ``--e``, so every prefix from ``--e`` is this one."""
    for arg in argv:
        name = arg.partition("=")[0]
        if len(name) > 2 and RERUN_FLAG.startswith(name):
            return name
    return None


def refuse_rerun(prog: str, argv: Sequence[str], fix: str) -> None:
    """Exit with status 2 and one line when ``argv`` holds ``--experimental-rerun`` (see the module docstring).

    Args:
        prog: The console script, e.g. ``embodirl-train``.
        argv: Its arguments (without the program name).
        fix: What to run instead.
    """
    flag = rerun_flag(argv)
    if flag is None:
        return
    written = "" if flag == RERUN_FLAG else f" (written {flag})"
    print(f"{prog}: error: {RERUN_FLAG}{written} is refused: Hydra unpickles its file, which can run any code, "
          f"and embodirl never writes that file. Fix: {fix}", file=sys.stderr)
    sys.exit(2)
