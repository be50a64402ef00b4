"""Bash (and zsh) completion for ``embodirl-train``: Hydra's own, with a config group that has subgroups offered as
``group=`` and ``group/``.

Every shipped group completes as ``group=option`` (``experiment=``, ``sweep=`` included: ``train.yaml`` declares
them, so no ``+`` is needed). Hydra offers a group that has subgroups (``algo``, with ``algo/optimizer``) as the
bare word ``algo``, which is neither; ``embodirl-train`` therefore answers the two completion commands itself
and passes everything else to Hydra:

* ``embodirl-train -sc install=bash`` prints :data:`BASH_SCRIPT` (``eval "$(embodirl-train -sc
  install=bash)"`` in ``~/.bashrc``; zsh: ``autoload -U bashcompinit && bashcompinit`` first).
* ``embodirl-train -sc query=bash`` (what the script runs on TAB, with ``COMP_LINE`` set) asks Hydra's
  own completion and expands its answers with :func:`rewrite_choices`.

``-sc uninstall=bash`` removes it; fish is left to Hydra (``-sc install=fish``).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable

from embodirl.cli.help import package_groups

__all__ = ["BASH_SCRIPT", "completion_request", "current_word", "query", "rewrite_choices", "shell_completion"]

FUNCTION = "_embodirl_train_completion"

BASH_SCRIPT = f"""{FUNCTION}()
{{
    local words=($COMP_LINE)
    command -v "${{words[0]}}" > /dev/null || return
    local choices
    choices=$(COMP_LINE="${{COMP_LINE:0:$COMP_POINT}}" "${{words[0]}}" -sc query=bash 2> /dev/null)
    COMPREPLY=($choices)
}}
COMP_WORDBREAKS=${{COMP_WORDBREAKS//=}}
complete -o nospace -o default -F {FUNCTION} embodirl-train
"""

UNINSTALL_SCRIPT = f"complete -r embodirl-train 2> /dev/null; unset -f {FUNCTION}\n"


def completion_request(argv: list[str]) -> str | None:
    """``install``, ``uninstall`` or ``query`` when ``argv`` asks for bash completion (``-sc query=bash``),
    else None."""
    if "-sc" not in argv and "--shell-completion" not in argv:
        return None
    for arg in argv:
        command, _, shell = arg.partition("=")
        if shell == "bash" and command in ("install", "uninstall", "query"):
            return command
    return None


def current_word(line: str) -> str:
    """The word being completed in ``COMP_LINE`` (``""`` after a space), program name excluded."""
    words = line.split()
    if len(words) <= 1 or line[-1:].isspace():
        return ""
    return words[-1]


def rewrite_choices(choices: list[str], word: str) -> list[str]:
    """Hydra's suggestions with a bare group that has subgroups offered as ``group=`` and ``group/``; kept are those
    that complete ``word``.

    Examples: ``["algo"]`` for ``""`` -> ``["algo=", "algo/"]``; ``["experiment=ppo_cartpole",
    "experiment=ppo_pendulum"]`` for ``"experiment=ppo_c"`` -> ``["experiment=ppo_cartpole"]``.
    """
    out = []
    for choice in choices:
        for expanded in [f"{choice}=", f"{choice}/"] if choice in package_groups() else [choice]:
            if expanded.startswith(word) and expanded not in out:
                out.append(expanded)
    return out


def query(line: str, hydra_query: Callable[[], None]) -> list[str]:
    """The rewritten suggestions for ``COMP_LINE`` ``line``; ``hydra_query`` prints Hydra's own."""
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        hydra_query()
    return rewrite_choices(captured.getvalue().split(), current_word(line))


def shell_completion(argv: list[str], hydra_main: Callable[[], None]) -> bool:
    """Answer a bash completion request in ``argv`` (print the script or the suggestions); False if none.

    Args:
        argv: The command-line arguments after the program name.
        hydra_main: Runs the ``@hydra.main`` function with ``argv`` (Hydra answers ``-sc query=bash``).
    """
    request = completion_request(argv)
    if request == "install":
        print(BASH_SCRIPT, end="")
    elif request == "uninstall":
        print(UNINSTALL_SCRIPT, end="")
    elif request == "query":
        print(" ".join(query(os.environ.get("COMP_LINE", ""), hydra_main)))
    return request is not None
