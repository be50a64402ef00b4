"""Bash (and zsh) completion for ``embodirl-train`` that writes ``+experiment=`` and ``+sweep=`` with their ``+``.

Hydra's completion proposes every config group as ``group=``; for a group that the primary config's
defaults list does not select (``experiment``, ``sweep``, a site's ``site``) Hydra then rejects
``experiment=x`` ("use +experiment=x"). ``embodirl-train`` therefore answers the two completion
commands itself and passes everything else to Hydra:

* ``embodirl-train -sc install=bash`` prints :data:`BASH_SCRIPT` (``eval "$(embodirl-train -sc
  install=bash)"`` in ``~/.bashrc``; zsh: ``autoload -U bashcompinit && bashcompinit`` first). Unlike
  Hydra's script it hands the words back unfiltered, so ``exp<TAB>`` may become ``+experiment=``.
* ``embodirl-train -sc query=bash`` (what the script runs on TAB, with ``COMP_LINE`` set) asks Hydra's
  own completion and rewrites its answers with :func:`rewrite_choices`.

``-sc uninstall=bash`` removes it; fish is left to Hydra (``-sc install=fish``), without the ``+`` fix.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable

from embodirl.cli.help import needs_plus, package_groups

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
    """Hydra's suggestions with the right ``+``: added for appended groups, dropped for selected ones.

    Only config groups are rewritten (``seed=`` is a key). Kept are those that complete ``word`` up to
    that ``+`` (``exp`` -> ``+experiment=``).

    Examples: ``["experiment=", "algo="]`` for ``""`` -> ``["+experiment=", "algo="]``; ``["algo"]`` (a group
    with subgroups, e.g. ``algo/optimizer``) -> ``["algo=", "algo/"]``;
    ``["+algo="]`` for ``"+al"`` -> ``["algo="]``; ``["experiment=ppo_cartpole"]`` for ``"experiment=p"``
    -> ``["+experiment=ppo_cartpole"]``.
    """
    out = []
    expanded = []
    for choice in choices:  # Hydra offers a group with subgroups bare ("algo"): it takes "=" or "/"
        expanded += [f"{choice}=", f"{choice}/"] if choice in package_groups() else [choice]
    for choice in expanded:
        bare = choice.removeprefix("+")
        group, eq, _ = bare.partition("=")
        if eq and not choice.startswith("~") and group.split("/")[0] in package_groups():
            choice = f"+{bare}" if needs_plus(group) else bare
        if choice.removeprefix("+").startswith(word.removeprefix("+")) and choice not in out:
            out.append(choice)
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
