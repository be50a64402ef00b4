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

A command line override that Hydra cannot apply (an unknown key, a list for a mapping) is set aside while the
config composes on without it, and its error is raised once the composition is done: Hydra's ``get_mode`` would
have failed on it alike (the same defaults, the same override), so it is not asked, and the config composed
without that override (:attr:`Composition.failed`) is what :mod:`embodirl.cli.suggest` reads its suggestion from,
where it composed that config again. One composition for such an error, where Hydra and the suggestion made three;
one for an option that does not exist (``algo=nope``), where Hydra made two.

:func:`parse_yaml_with_libyaml` has OmegaConf read the option files with libyaml's parser (PyYAML's C one) under
OmegaConf's own loader: the same resolvers and constructors, the same duplicate-key refusal, so the same config.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Composition", "composed_once", "parse_yaml_with_libyaml"]

RUN_OVERRIDE = "hydra.mode=RUN"  # what Hydra's _run_app adds for a single run whose config sets no mode


@dataclass
class Composition:
    """What :func:`composed_once` learnt of a command line that failed at one override.

    Attributes:
        failed: ``(error, config name, config)``: the error of the one override Hydra could not apply, with the
            config (Hydra's node included) composed from the config name and every other override; None when
            no override failed, or more than one did.
    """

    failed: tuple[BaseException, str | None, Any] | None = None

    def without_failed(self, exc: BaseException, config_name: str) -> Any | None:
        """The config composed without the override that raised ``exc`` for ``config_name``, or None."""
        if self.failed is None or self.failed[0] is not exc or self.failed[1] != config_name:
            return None
        return self.failed[2]


@contextlib.contextmanager
def composed_once(argv: Sequence[str]) -> Iterator[Composition]:
    """While inside, a single run's ``@hydra.main`` composes its config once; a no-op for ``-m``/``--multirun``.

    Args:
        argv: The command line after the program's name (Hydra's own flags are read from it).

    Yields:
        What the composition learnt of an override that failed (filled in when one did).
    """
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import get_args_parser

    learnt = Composition()
    if get_args_parser().parse_args(list(argv)).multirun:
        yield learnt  # Hydra composes a multirun for its sweeper: nothing of the first composition is reused
        return
    hydra_get_mode = Hydra.get_mode
    Hydra.get_mode = _get_mode_keeping(hydra_get_mode, learnt)  # type: ignore[method-assign]
    try:
        yield learnt
    finally:
        Hydra.get_mode = hydra_get_mode  # type: ignore[method-assign]


def _get_mode_keeping(hydra_get_mode: Any, learnt: Composition) -> Any:
    """``Hydra.get_mode`` that composes as the run does and leaves the result for the run's composition."""
    from hydra.errors import MissingConfigException
    from hydra.types import RunMode

    def get_mode(hydra: Any, config_name: str | None, overrides: list[str]) -> Any:
        given = list(overrides)  # Hydra extends the very list it passes before composing the run
        loader = hydra.config_loader
        try:
            cfg = _load_setting_aside(loader, (config_name, given, RunMode.RUN), learnt)
        except Exception as exc:
            # Failed at an override, or on a config file that does not exist (algo=nope): get_mode's composition
            # (the same defaults and files) fails alike and answers None. Else (a sweep, a default left ???), ask it.
            alike = learnt.failed is not None or isinstance(exc, MissingConfigException)
            mode = None if alike else hydra_get_mode(hydra, config_name, given)
            if mode != RunMode.MULTIRUN:  # the run composes as above, and fails as above
                _serve_once(loader, (config_name, _run_overrides(given, mode), RunMode.RUN), error=exc)
            return mode
        mode = cfg.hydra.mode
        if mode != RunMode.MULTIRUN:
            _serve_once(loader, (config_name, _run_overrides(given, mode), RunMode.RUN), cfg=cfg)
        return mode

    return get_mode


def _load_setting_aside(loader: Any, request: tuple[Any, list[str], Any], learnt: Composition) -> Any:
    """``loader.load_configuration(*request)``, with a command line override Hydra cannot apply set aside (its
    error raised once the rest has composed, and ``learnt.failed`` filled in when it was the only one)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.errors import ConfigCompositionException

    hydra_apply = ConfigLoaderImpl.__dict__["_apply_overrides_to_config"]  # the staticmethod itself
    apply = ConfigLoaderImpl._apply_overrides_to_config
    errors: list[BaseException] = []

    def apply_each(overrides: list[Any], cfg: Any) -> None:
        for override in overrides:  # as Hydra's loop does, one by one
            try:
                apply([override], cfg)
            except ConfigCompositionException as exc:  # another error ends the composition, as in Hydra
                errors.append(exc)

    ConfigLoaderImpl._apply_overrides_to_config = staticmethod(apply_each)  # type: ignore[method-assign]
    try:
        cfg = loader.load_configuration(config_name=request[0], overrides=request[1], run_mode=request[2])
    except Exception as later:
        if errors:  # the override's error, as Hydra raises it (its own cause kept)
            raise errors[0] from errors[0].__cause__ or later
        raise
    finally:
        ConfigLoaderImpl._apply_overrides_to_config = hydra_apply  # type: ignore[method-assign]
    if errors:
        learnt.failed = (errors[0], request[0], cfg) if len(errors) == 1 else None
        raise errors[0]
    return cfg


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


def parse_yaml_with_libyaml() -> None:
    """Have OmegaConf parse YAML (every file Hydra composes) with libyaml's parser where PyYAML has it; OmegaConf's
    loader does the rest as before. Idempotent; a no-op without libyaml."""
    import yaml
    from omegaconf import _utils, basecontainer

    omegaconf_get_yaml_loader = _utils.get_yaml_loader
    if not getattr(yaml, "__with_libyaml__", False) or hasattr(omegaconf_get_yaml_loader, "pure_python"):
        return
    loader = _libyaml_loader(omegaconf_get_yaml_loader())

    def get_yaml_loader() -> Any:
        return loader

    get_yaml_loader.pure_python = omegaconf_get_yaml_loader  # type: ignore[attr-defined]
    _utils.get_yaml_loader = get_yaml_loader  # read at each call by OmegaConf.load and OmegaConf.create
    basecontainer.get_yaml_loader = get_yaml_loader  # imported by name there


def _libyaml_loader(omegaconf_loader: type) -> type:
    """OmegaConf's loader class with libyaml's parser before PyYAML's pure Python reader, scanner and composer."""
    from yaml.cyaml import CParser, CSafeLoader

    class LibyamlOmegaConfLoader(CParser, omegaconf_loader):
        __init__ = CSafeLoader.__init__  # the C parser's state, then the constructor's and the resolver's

    return LibyamlOmegaConfLoader
