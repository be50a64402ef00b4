"""``embodirl-eval run=RUN_DIR checkpoint=best|last`` (or ``checkpoint=PATH``): deterministic episodes with a
trained policy.

Rebuilds the env and policy from the checkpoint's stored config (so no training flags need to be
repeated), runs ``num_episodes`` deterministic episodes, prints a table and writes ``eval.json`` (and the
video) into ``RUN_DIR/eval/<date>_<time>/`` when the checkpoint belongs to a run directory, else into
``outputs/eval/<date>/<time>/`` (``hydra.run.dir`` overrides both). The checkpoint is data: it is loaded with
``weights_only=True`` and its config may only name classes embodirl ships (or ``trusted_targets`` given on the
command line); see :mod:`embodirl.config.trust`.

``embodirl-eval export=DIR [env=NAME env.KEY=VALUE ...]`` is the sim-to-sim check of an ``embodirl-export``
directory: the exported file itself (:mod:`embodirl.app.exported`) runs the same seeded episodes as the checkpoint
it came from, in the training env and in the second env ``env=NAME`` chooses, and the rows are reported side by
side with every gap beyond noise named (:mod:`embodirl.analysis.sim2sim`); a gap beyond noise fails the check: one line
on stderr and exit status 1, after the table and ``eval.json``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from embodirl.config.randomize import SweepConfig
from embodirl.errors import CheckpointError, ConfigError

if TYPE_CHECKING:  # the command line imports torch only once the config is checked
    import torch

    from embodirl.app.exported import ExportedPolicy
    from embodirl.envs.base import BatchedEnv
    from embodirl.policies.base import Policy

log = logging.getLogger("embodirl.eval")  # into the evaluation directory's evaluate.log, and the console

PROG = "embodirl-eval"
NAMED = ("best", "last")  # checkpoint=best|last: checkpoints/best.pt or last.pt of run=RUN_DIR
SWEEP_METRICS = ("eval/success_rate", "eval/return_mean")  # logged per bin of a sweep (eval.json keeps them all)


def as_run(run: Any, checkpoint: Any) -> tuple[Any, Any]:
    """``(run, checkpoint)`` with ``checkpoint=<a run directory>`` read as ``run=<it>`` (its last checkpoint)."""
    if run is None and isinstance(checkpoint, str) and checkpoint and (Path(checkpoint) / "checkpoints").is_dir():
        return checkpoint, "last"
    return run, checkpoint


def owning_run(run: Any, checkpoint: Any) -> Path | None:
    """The run directory an evaluation belongs to: the run whose ``checkpoints/`` folder holds the checkpoint
    file (named in ``run`` and ``checkpoint``, or a path in ``checkpoint``); None when there is no such file."""
    run, checkpoint = as_run(run, checkpoint)
    path = Path(str(checkpoint))
    if run is not None:
        name = f"{checkpoint}.pt" if checkpoint in NAMED else str(checkpoint)
        path = Path(str(run)) / "checkpoints" / name
    return path.parent.parent if path.parent.name == "checkpoints" and path.is_file() else None


def eval_dir(run: Any, checkpoint: Any, day: str, time: str) -> str:
    """``hydra.run.dir`` of an evaluation: ``RUN/eval/<day>_<time>`` next to its run, else
    ``outputs/eval/<day>/<time>``."""
    from embodirl.runtime.files import check_run_dir_links

    owner = owning_run(run, checkpoint)
    if owner is not None:
        check_run_dir_links(owner)  # a linked RUN/eval/ would put the results (and the log) outside the run
    return str(owner / "eval" / f"{day}_{time}") if owner is not None else f"outputs/eval/{day}/{time}"


OmegaConf.register_new_resolver("embodirl_eval_dir", eval_dir, replace=True)


def resolve_checkpoint(run: Any, checkpoint: Any) -> Path:
    """The checkpoint file ``run`` and ``checkpoint`` name (see ``conf/eval.yaml``).

    ``checkpoint=<a run directory>`` is read as ``run=<it> checkpoint=last``.

    Raises:
        ConfigError: ``run`` is no directory, a named checkpoint without ``run``, a path with ``run``, or a
            directory that is not a run's.
    """
    run, checkpoint = as_run(run, checkpoint)
    if not isinstance(checkpoint, str) or not checkpoint:
        raise ConfigError("checkpoint", checkpoint, "best, last, a file name in RUN_DIR/checkpoints/, or a .pt path",
                          "pass run=outputs/<date>/<time> checkpoint=best (or checkpoint=<path>.pt)")
    if run is None:
        if checkpoint in NAMED and not Path(checkpoint).is_file():
            raise ConfigError("checkpoint", checkpoint,
                              f"a .pt path ({checkpoint} names a run's checkpoint: add run=RUN_DIR)",
                              f"pass run=outputs/<date>/<time> checkpoint={checkpoint}, "
                              "or checkpoint=<path of a .pt file>")
        if Path(checkpoint).is_dir():
            raise ConfigError("checkpoint", checkpoint, "a .pt file, or a run directory (one that holds checkpoints/)",
                              f"pass run=<the run directory> (this one has no checkpoints/), or checkpoint=<a .pt file "
                              f"in {checkpoint}>")
        return Path(checkpoint)
    folder = Path(str(run)) / "checkpoints"
    if not Path(str(run)).is_dir() or not folder.is_dir():
        raise ConfigError("run", run, "a run directory of embodirl-train (one that holds checkpoints/)",
                          "pass run=outputs/<date>/<time>, the directory the training printed")
    if "/" in checkpoint or "\\" in checkpoint:
        raise ConfigError("checkpoint", checkpoint,
                          "with run=, best, last or a file name in RUN_DIR/checkpoints/ (a path goes without run=)",
                          f"pass checkpoint=best, or drop run= to evaluate {checkpoint}")
    name = f"{checkpoint}.pt" if checkpoint in NAMED else checkpoint
    path = folder / name
    if not path.is_file():
        found = ", ".join(sorted(p.name for p in folder.glob("*.pt")))
        why = " (best.pt is written at the run's first evaluation)" if checkpoint == "best" else ""
        # With no checkpoint at all, naming checkpoint=last would send the user to a second refusal.
        fix = ("pass checkpoint=last, or one of the files found" if found else
               f"train the run first (embodirl-train hydra.run.dir={run} continues it), or pass run=<a run with "
               "checkpoints>")
        raise ConfigError("checkpoint", checkpoint,
                          f"a checkpoint present in {folder} (found: {found or 'none'}){why}", fix)
    return path


def read_checkpoint(run: Any, checkpoint: Any, trusted: Any) -> tuple[Path, dict[str, Any], DictConfig]:
    """``(path, state, training config)``: the checkpoint ``run`` and ``checkpoint`` name (see
    :func:`resolve_checkpoint`), loaded as data and checked, and the config it was trained with.

    Raises:
        ConfigError: ``trusted`` is no list of class paths, or the checkpoint is named wrongly.
        CheckpointError: The file is missing, unreadable, or names classes that are not trusted.
    """
    from embodirl.config.trust import check_config_from_file, with_moved_targets
    from embodirl.runtime.checkpoint import load_checkpoint

    if not isinstance(trusted, ListConfig | list) or not all(isinstance(t, str) for t in trusted):
        raise ConfigError("trusted_targets", trusted, "a list of class paths, e.g. [mypkg.envs.MyEnv]",
                          "pass 'trusted_targets=[mypkg.envs.MyEnv]' or leave it empty")
    path = resolve_checkpoint(run, checkpoint)
    state = load_checkpoint(path, key="checkpoint")
    state["config"] = with_moved_targets(state["config"])  # classes a checkpoint of an earlier version names
    check_config_from_file(state["config"], f"checkpoint={str(path)!r}", list(trusted))
    train_cfg = OmegaConf.create(state["config"])
    train_cfg.policy.init_from = None  # the checkpoint's own weights are evaluated, not the ones it started from
    return path, state, train_cfg


def _checkpoint_config(cfg: DictConfig, conditions: str) -> tuple[Path, dict[str, Any], DictConfig, dict[str, Any]]:
    """``(path, state, env config, env overrides)``: :func:`read_checkpoint` of what ``cfg`` names, its env
    without ``randomize`` for ``conditions=nominal``, and the command line's ``env.*`` keys merged in."""
    from embodirl.cli.containers import plain_dict

    path, state, train_cfg = read_checkpoint(cfg.run, cfg.checkpoint, cfg.trusted_targets)
    if conditions == "nominal" and train_cfg.env.get("randomize"):
        train_cfg.env.randomize = {}
    overrides = {k: v for k, v in plain_dict(cfg.env).items() if v is not None}
    train_cfg.env = OmegaConf.merge(train_cfg.env, overrides)
    return path, state, train_cfg, overrides


def describe_conditions(conditions: str, randomize: Any, trained: Any) -> str:
    """What the plain evaluation's env randomizes, in words: ``randomize`` for ``conditions`` (``nominal`` or
    ``training``), given the run's own ``env.randomize`` (``trained``)."""
    drawn, learned = ", ".join(randomize or {}), ", ".join(trained or {})
    if conditions == "training":
        return f"training: {drawn} randomized as the run trained" if drawn else \
            "training: the run randomized nothing (nominal)"
    text = f"nominal, {drawn} randomized (env.randomize on the command line)" if drawn else "nominal: no randomization"
    return f"{text}; the run trained with {learned} randomized (eval.conditions=training draws them)" if learned \
        else text


def restored_policy(policy_cfg: DictConfig, env: BatchedEnv, device: torch.device, weights: dict[str, Any],
                     path: Path) -> Policy:
    """The checkpoint's policy, rebuilt from its config for ``env`` and given its ``weights``, in eval mode.

    Raises:
        CheckpointError: The weights do not fit the policy the config builds.
    """
    import torch

    from embodirl.app.build import build_policy

    policy = build_policy(policy_cfg, env, device)
    assert isinstance(policy, torch.nn.Module)  # a policy that trained (and saved these weights) is a module
    try:
        policy.load_state_dict(weights)
    except (RuntimeError, KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint={str(path)!r}: its policy weights do not fit its own config "
                              f"({str(exc).splitlines()[0]})") from exc
    policy.eval()
    return policy


def evaluate_checkpoint(cfg: DictConfig, out_dir: Path) -> dict[str, Any]:
    """Load ``cfg.checkpoint``, rebuild env and policy, evaluate (and film); return the result record."""
    from embodirl.app.build import build_env, check_video, configure_torch, resolve_device
    from embodirl.cli.containers import plain_dict
    from embodirl.collect.evaluator import evaluate_policy
    from embodirl.config.run import EvaluateEvalConfig
    from embodirl.config.schema import parse
    from embodirl.training.video import record_episode, save_video

    video = parse(EvaluateEvalConfig, plain_dict(cfg.eval), "eval.")
    second = second_env(cfg)
    if second is not None:  # env=NAME chose a whole env: the second env of export=
        raise ConfigError("env", second[1], "keys of the checkpoint's env (env.num_envs=8, +env.KEY=VALUE); a second "
                          "env, env=NAME, is for an export's sim-to-sim check",
                          f"drop env={second[1]} (or set a key, e.g. env.num_envs=8), or pass export=<run>/export/onnx "
                          f"to run the run's export in {second[1]}", absolute=True)
    path, state, train_cfg, overrides = _checkpoint_config(cfg, video.conditions)
    if not isinstance(cfg.num_episodes, int) or isinstance(cfg.num_episodes, bool) or cfg.num_episodes < 1:
        raise ConfigError("num_episodes", cfg.num_episodes, "an int >= 1", "pass num_episodes=100")
    configure_torch(cfg.seed, cfg.num_threads)
    device = resolve_device(cfg.device)
    _check_sweep(video.sweep, train_cfg.env)
    num_envs = overrides.get("num_envs", _eval_num_envs(state["config"]))
    env = build_env(train_cfg.env, device, cfg.seed, num_envs=num_envs, render=video.video)
    policy = restored_policy(train_cfg.policy, env, device, state["policy"], path)
    check_video(video, env, count_key="env.num_envs")
    randomize = plain_dict(train_cfg.env.randomize) if train_cfg.env.get("randomize") else {}
    extra: dict[str, Any] = {"conditions": describe_conditions(video.conditions, randomize,
                                                               state["config"]["env"].get("randomize")),
                             "randomize": randomize}
    log.info("evaluating %s: %d %s episodes (seed %d, %s), conditions %s", path, cfg.num_episodes,
             "deterministic" if video.deterministic else "sampled", cfg.seed, device, extra["conditions"])
    try:
        metrics = evaluate_policy(env, policy, cfg.num_episodes, seed=cfg.seed, deterministic=video.deterministic)
        if video.video:
            frames = record_episode(env, policy, video.num_filmed(env.num_envs), video.video_size, cfg.seed)
            extra["video"] = str(save_video(frames, out_dir / f"video.{video.video_format}", video.video_fps))
    finally:
        env.close()
    if video.sweep.param is not None:
        extra["sweep"] = evaluate_sweep(video.sweep, train_cfg.env, policy, device, cfg.seed, num_envs,
                                        cfg.num_episodes, video.deterministic)
    solved = env.is_solved(metrics)
    trained = state["trainer"].get("env_steps") if isinstance(state["trainer"], dict) else None
    owner = owning_run(cfg.run, cfg.checkpoint)
    log.info("%s on %d %s envs: %s", path, env.num_envs, type(env).__name__,
             ", ".join(f"{k}={v:.4g}" for k, v in metrics.items() if isinstance(v, float)))
    return {"checkpoint": str(path.resolve()), "run": str(owner.resolve()) if owner else None,
            "env": train_cfg.env._target_,
            "num_envs": env.num_envs, "env_steps_trained": trained if isinstance(trained, int) else None, **metrics,
            "solved_metric": env.solved_metric, "solved_threshold": env.solved_threshold, "solved": solved, **extra}


def _checkpoint_of(cfg: DictConfig, policy: ExportedPolicy) -> tuple[Any, Any]:
    """``(run, checkpoint)``: the command line's ``run=`` (and ``checkpoint=``), else the manifest's checkpoint."""
    if cfg.run is not None:
        return cfg.run, cfg.checkpoint
    named = policy.manifest.get("checkpoint")
    if not isinstance(named, str) or not Path(named).is_file():
        raise ConfigError("export", str(cfg.export), f"an export whose checkpoint is present (its manifest names "
                          f"{named!r}, not a file here)", "pass run=<the run dir> checkpoint=<last|best|step_*.pt> "
                          "beside export=, the checkpoint the export was written from")
    return None, named


def _refuse_unsupported(cfg: DictConfig) -> None:
    """An export is the deterministic actor, evaluated without a video or a sweep."""
    for key, value, expected in (("eval.deterministic", cfg.eval.deterministic, True),
                                 ("eval.video", cfg.eval.video, False),
                                 ("eval.sweep.param", cfg.eval.sweep.param, None)):
        if value != expected:
            raise ConfigError(key, value, f"{str(expected).lower() if expected is not None else 'null'} with "
                              "export= (an export is the deterministic actor; films and sweeps evaluate checkpoints)",
                              f"drop {key}, or evaluate the checkpoint without export=", absolute=True)


def env_label(node: DictConfig, choice: str | None = None) -> str:
    """An env in words: its ``conf/env`` option (or class name), with its gymnasium/Playground id."""
    name = choice or str(node.get("_target_", "?")).rsplit(".", 1)[-1]
    return f"{name} id={node.id}" if node.get("id") is not None else name


def second_env(cfg: DictConfig) -> tuple[DictConfig, str] | None:
    """The env ``env=NAME`` chose (a whole ``conf/env`` node, ``_target_`` included) and its label, else None."""
    if cfg.env.get("_target_") is None:
        return None
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return cfg.env.copy(), env_label(cfg.env)
    hydra_cfg = HydraConfig.get()
    # The keys changed on the command line tell two second envs of one option apart (env.table_friction=0.6).
    changed = [o for o in hydra_cfg.overrides.task if o.lstrip("+").startswith("env.") and not o.startswith("env.id=")
               and not o.startswith("env.num_envs=")]
    return cfg.env.copy(), " ".join([env_label(cfg.env, hydra_cfg.runtime.choices.get("env")), *changed])


def _episodes(env: BatchedEnv, policy: Policy | ExportedPolicy, cfg: DictConfig) -> dict[str, Any]:
    """``cfg.num_episodes`` deterministic episodes seeded ``cfg.seed`` (an export answers the only calls the
    evaluator makes on a policy: ``initial_state`` and ``mode``)."""
    from embodirl.collect.evaluator import evaluate_policy

    return evaluate_policy(env, cast("Policy", policy), cfg.num_episodes, seed=cfg.seed)


def evaluate_export(cfg: DictConfig) -> dict[str, Any]:
    """``export=DIR``: the checkpoint in its training env, the exported file there and, with ``env=NAME``, in that
    second env, on the same seeded episodes; their comparisons (:func:`embodirl.analysis.sim2sim.compare`) and the
    ``eval.json`` record. Every env is built and checked against the manifest before the first episode runs.
    """
    from embodirl.analysis.sim2sim import compare
    from embodirl.app.build import build_env, configure_torch, resolve_device
    from embodirl.app.exported import check_layout, load_export
    from embodirl.cli.containers import plain_dict

    _refuse_unsupported(cfg)
    configure_torch(cfg.seed, cfg.num_threads)
    device = resolve_device(cfg.device)
    exported = load_export(cfg.export, device)
    path, state, train_cfg = read_checkpoint(*_checkpoint_of(cfg, exported), cfg.trusted_targets)
    second = second_env(cfg)
    if cfg.eval.conditions == "nominal" and train_cfg.env.get("randomize"):
        train_cfg.env.randomize = {}
    if second is None:  # env.KEY=VALUE change the training env, as for a checkpoint
        train_cfg.env = OmegaConf.merge(train_cfg.env, {k: v for k, v in plain_dict(cfg.env).items() if v is not None})
    num_envs = cfg.env.get("num_envs") or _eval_num_envs(state["config"])
    trained = f"{env_label(train_cfg.env)} (training)"
    with ExitStack() as stack:
        env = build_env(train_cfg.env, device, cfg.seed, num_envs=num_envs)
        stack.callback(env.close)
        check_layout(exported, env, "export", str(cfg.export))
        envs = [(env, trained)]
        if second is not None:
            envs.append((build_env(second[0], device, cfg.seed, num_envs=num_envs), second[1]))
            stack.callback(envs[1][0].close)
            check_layout(exported, envs[1][0], "env", second[1])
        policy = restored_policy(train_cfg.policy, env, device, state["policy"], path)
        rows = [{"policy": "checkpoint", "env": trained, **_episodes(env, policy, cfg)}]
        rows += [{"policy": f"export ({exported.format})", "env": label, **_episodes(e, exported, cfg)}
                 for e, label in envs]
    randomize = plain_dict(train_cfg.env.randomize) if train_cfg.env.get("randomize") else {}
    comparisons = compare(rows)
    return {"export": str(Path(cfg.export).resolve()), "format": exported.format, "checkpoint": str(path.resolve()),
            "seed": cfg.seed, "num_episodes": cfg.num_episodes,
            "conditions": describe_conditions(cfg.eval.conditions, randomize, state["config"]["env"].get("randomize")),
            "eval/return_mean": rows[1]["eval/return_mean"], "rows": rows, "comparisons": comparisons,
            "mismatches": [c["text"] for c in comparisons if c["mismatch"]]}


def _check_sweep(sweep: SweepConfig, env_cfg: DictConfig) -> None:
    """``eval.sweep.param`` is a parameter the checkpoint's env randomizes.

    Raises:
        ConfigError: Naming ``eval.sweep.param``, the env's parameters and a fix.
    """
    from embodirl.config.schema import schema_for, suggest

    if sweep.param is None:
        return
    params = list(getattr(schema_for(str(env_cfg.get("_target_"))), "randomizable", {}))
    if sweep.param not in params:
        names = ", ".join(params)
        close = suggest(sweep.param, params) or (params[0] if params else None)
        raise ConfigError("eval.sweep.param", sweep.param, f"a parameter {env_cfg.get('_target_')} randomizes "
                          f"(one of: {names or 'none: this env takes no env.randomize'})",
                          f"pass eval.sweep.param={close}" if close else "drop eval.sweep.param")


def evaluate_sweep(sweep: SweepConfig, env_cfg: DictConfig, policy: Policy, device: torch.device, seed: int,
                   num_envs: int | None, num_episodes: int, deterministic: bool = True) -> dict[str, Any]:
    """Evaluate ``policy`` once per value of ``sweep.param``, fixed at that value for every episode of its bin.

    Each bin's env is ``env_cfg``, the plain evaluation's env (``eval.conditions``), with the swept parameter
    fixed (range ``[value, value]``) and the others as there: nominal by default, so the bin at x1 (relative)
    repeats the plain evaluation's episodes.

    Returns:
        ``{"param", "scale", "conditions", "bins": [{"value", "eval/success_rate", "eval/return_mean", ...}, ...]}``.

    Raises:
        ConfigError: A value the env refuses (keyed ``eval.sweep.values[i]``).
    """
    from embodirl.app.build import build_env
    from embodirl.collect.evaluator import evaluate_policy

    others = {k: v for k, v in (env_cfg.get("randomize") or {}).items() if k != sweep.param}
    bins = []
    for i, value in enumerate(sweep.values):
        node = env_cfg.copy()
        with open_dict(node):
            node.randomize = {**others, sweep.param: {"range": [value, value], "scale": sweep.scale}}
        try:
            env = build_env(node, device, seed, num_envs=num_envs)
        except ConfigError as exc:
            raise ConfigError(f"eval.sweep.values[{i}]", value, exc.expected, "drop this value or narrow the "
                              "sweep", absolute=True) from None
        try:
            metrics = evaluate_policy(env, policy, num_episodes, seed=seed, deterministic=deterministic)
        finally:
            env.close()
        log.info("sweep %s=%g (%s): %s", sweep.param, value, sweep.scale,
                 ", ".join(f"{k}={v:.4g}" for k, v in metrics.items() if k in SWEEP_METRICS))
        bins.append({"value": value, **metrics})
    rest = f"{', '.join(others)} randomized as in the plain evaluation" if others else "the rest nominal"
    return {"param": sweep.param, "scale": sweep.scale, "conditions": f"{sweep.param} fixed per bin, {rest}",
            "bins": bins}


def _eval_num_envs(config: dict[str, Any]) -> Any:
    """The training run's number of evaluation envs: ``eval.num_envs``, or ``trainer.num_eval_envs`` in a
    checkpoint written before the evaluation keys moved to the ``eval`` node."""
    evaluation, trainer = config.get("eval"), config.get("trainer")
    if isinstance(evaluation, dict) and evaluation.get("num_envs") is not None:
        return evaluation["num_envs"]
    return trainer.get("num_eval_envs") if isinstance(trainer, dict) else None


EVAL_LOG = "evaluate.log"  # Hydra's job log (conf/eval.yaml)


@hydra.main(version_base="1.3", config_path="pkg://embodirl.conf", config_name="eval")
def _evaluate(cfg: DictConfig) -> float:
    from embodirl.analysis.sim2sim import failure_line, print_sim2sim
    from embodirl.analysis.summary import print_eval
    from embodirl.cli.errors import fail
    from embodirl.cli.process import interrupted
    from embodirl.config.run import check_evaluate_config
    from embodirl.runtime.files import atomic_write_json

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    discard = _discard_if_unproduced()
    try:
        check_evaluate_config(cfg)  # every key against the schema, before torch is imported
        result = evaluate_export(cfg) if cfg.export is not None else evaluate_checkpoint(cfg, out_dir)
        out = out_dir / "eval.json"
        atomic_write_json(out, result)
    except KeyboardInterrupt:
        log_kept = "" if discard() else f" (its log: {out_dir / EVAL_LOG})"
        interrupted(PROG, f"the evaluation did not finish and wrote no eval.json{log_kept}; run the same command "
                    "again to evaluate")
    except Exception as exc:  # one line and an exit status for every failure
        discard()
        fail(PROG, exc)
    (print_sim2sim if "rows" in result else print_eval)(result)
    log.info("wrote %s", out)
    failed = failure_line(result["comparisons"]) if "rows" in result else None
    if failed is not None:  # a check that fails exits 1 (2 is for bad input), after its table and eval.json
        print(f"{PROG}: {failed}", file=sys.stderr)
        sys.exit(1)
    return result["eval/return_mean"]


def _discard_if_unproduced() -> Callable[[], bool]:
    """A call that removes the evaluation's directory if Hydra made it for this command (it holds only Hydra's
    config copy and an empty log now) and nothing was evaluated into it, with the default directory's parents
    left empty (``<run>/eval``, ``outputs/eval/<date>``); it returns whether the directory was removed."""
    from embodirl.runtime.rundir import discard_unproduced, holds_only_empty_files

    hydra_cfg = HydraConfig.get()
    out_dir, subdir = Path(hydra_cfg.runtime.output_dir), str(hydra_cfg.output_subdir)
    if not holds_only_empty_files(out_dir, skip=subdir):
        return lambda: False
    start = {f"{subdir}/{name}" for name in ("config.yaml", "hydra.yaml", "overrides.yaml")} | {EVAL_LOG}
    default = not any(str(o).startswith("hydra.run.dir=") for o in hydra_cfg.overrides.hydra)
    return lambda: discard_unproduced(out_dir, start, parents=3 if default else 0)


def main() -> None:
    """The ``embodirl-eval`` console script (``--help`` is answered by :func:`embodirl.cli.help.eval_help_page`)."""
    from embodirl.cli.errors import hydra_entry
    from embodirl.cli.flags import refuse_rerun
    from embodirl.cli.help import eval_help_page, help_request

    refuse_rerun(PROG, sys.argv[1:], "run again with the overrides in <eval dir>/.hydra_eval/overrides.yaml "
                 "(e.g. embodirl-eval run=<run dir> checkpoint=best)")
    overrides = help_request(sys.argv[1:])
    if overrides is not None:
        hydra_entry(PROG, lambda: print(eval_help_page(overrides, PROG)), config_name="eval")
        return
    hydra_entry(PROG, _command, config_name="eval")


def _command() -> None:
    """:func:`_evaluate`, with a Ctrl-C before it began (while Hydra composed the config) reported as such."""
    from embodirl.cli.process import interrupted

    try:
        _evaluate()
    except KeyboardInterrupt:
        interrupted(PROG, "before the evaluation began; nothing was written")


def console() -> None:
    """The console script: :func:`main`, then a quick end of the process (:mod:`embodirl.cli.process`)."""
    from embodirl.cli.process import run_console_script

    run_console_script(main)


if __name__ == "__main__":
    console()
