"""One composition per run: the config Hydra composes to learn the run mode is the run's config.

``@hydra.main`` composes a command line's config twice for a single run: first (``Hydra.get_mode``) only to read
``hydra.mode`` (a ready sweep, ``sweep=seeds``, sets ``MULTIRUN`` in its file), then again for the run, with
``hydra.mode=RUN`` added to the overrides when the config leaves the mode unset. The two differ in nothing else:
the second composition sets that one key and lists its override. :func:`composed_once` composes the first time
as the run composes, keeps the result, and hands it to the run's composition when that asks for exactly it
(the same config name and overrides, ``RUN`` mode), with the mode set as the override would set it.

What stays Hydra's own: a multirun (``-m``, or a config whose ``hydra.mode`` is ``MULTIRUN``) composes as
Hydra does; a command line whose config does not compose as a run asks Hydra's ``get_mode`` (its first
composition tolerates a sweep, which a ready sweep's file allows) and, where Hydra would then compose a run,
raises the same error again instead of composing a second time. Hydra's logging setup and its callbacks run as
before: only the configuration loader's result is reused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["composed_once"]

RUN_OVERRIDE = "hydra.mode=RUN"  # what Hydra's _run_app adds for a single run whose config sets no mode


@contextlib.contextmanager
def composed_once(argv: Sequence[str]) -> Iterator[None]:
    """While inside, a single run's ``@hydra.main`` composes its config once; a no-op for ``-m``/``--multirun``.

    Args:
        argv: The command line after the program's name (Hydra's own flags are read from it).
    """
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import get_args_parser

    if get_args_parser().parse_args(list(argv)).multirun:
        yield  # Hydra composes a multirun for its sweeper: nothing of the first composition is reused
        return
    hydra_get_mode = Hydra.get_mode
    Hydra.get_mode = _get_mode_keeping(hydra_get_mode)  # type: ignore[method-assign]
    try:
        yield
    finally:
        Hydra.get_mode = hydra_get_mode  # type: ignore[method-assign]


def _get_mode_keeping(hydra_get_mode: Any) -> Any:
    """``Hydra.get_mode`` that composes as the run does and leaves the result for the run's composition."""
    from hydra.types import RunMode

    def get_mode(hydra: Any, config_name: str | None, overrides: list[str]) -> Any:
        given = list(overrides)  # Hydra extends the very list it passes before composing the run
        loader = hydra.config_loader
        try:
            cfg = loader.load_configuration(config_name=config_name, overrides=given, run_mode=RunMode.RUN)
        except Exception as exc:
            mode = hydra_get_mode(hydra, config_name, given)
            if mode != RunMode.MULTIRUN:  # the run composes as above, and fails as above
                _serve_once(loader, (config_name, _run_overrides(given, mode), RunMode.RUN), error=exc)
            return mode
        mode = cfg.hydra.mode
        if mode != RunMode.MULTIRUN:
            _serve_once(loader, (config_name, _run_overrides(given, mode), RunMode.RUN), cfg=cfg)
        return mode

    return get_mode


def _run_overrides(given: list[str], mode: Any) -> list[str]:
    """The overrides Hydra composes a single run with: ``hydra.mode=RUN`` added when the config sets no mode."""
    return given if mode is not None else [*given, RUN_OVERRIDE]


def _serve_once(loader: Any, request: tuple[Any, list[str], Any], cfg: Any = None,
                error: BaseException | None = None) -> None:
    """The loader's next ``load_configuration`` returns ``cfg`` (or raises ``error``) when it asks for ``request``
    (config name, overrides, run mode); any call, that one or another, restores the loader's own method."""
    load = loader.load_configuration

    def load_configuration(config_name: str | None, overrides: list[str], run_mode: Any, **kwargs: Any) -> Any:
        del loader.load_configuration  # the instance attribute: the class's method is back
        if (config_name, list(overrides), run_mode) != request:
            return load(config_name=config_name, overrides=overrides, run_mode=run_mode, **kwargs)
        if error is not None:
            raise error
        if cfg.hydra.mode is None:  # as the override sets it (Hydra's _apply_overrides_to_config, then its list)
            cfg.hydra.mode = request[2]
            cfg.hydra.overrides.hydra.append(RUN_OVERRIDE)
        return cfg

    loader.load_configuration = load_configuration
