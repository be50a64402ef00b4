"""benchmarks/race.py: embodirl's settings carried over to PureJaxRL, one run timed from outside, the table,
and what is skipped. The peers' venvs are not needed: fake contenders are small Python programs."""
import copy
import importlib.util
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
_spec = importlib.util.spec_from_file_location("race", BENCHMARKS / "race.py")
race = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(race)


@pytest.fixture(scope="module")
def embodirl_cfg():
    return race.embodirl_config(sys.executable)


def _set_values(argv):
    values = argv[argv.index("--set") + 1:argv.index("--eval-freq")]
    return {k: json.loads(v) for k, v in (item.split("=", 1) for item in values)}


@pytest.mark.slow  # fresh-process probes of embodirl-train or a script
def test_purejaxrl_runs_at_the_settings_embodirl_train_composes(embodirl_cfg):
    argv, _ = race.purejaxrl_settings(embodirl_cfg)
    got, algo = _set_values(argv), embodirl_cfg["algo"]
    assert (got["NUM_ENVS"], got["NUM_STEPS"]) == (embodirl_cfg["env"]["num_envs"], algo["num_steps"])
    assert got["NUM_ENVS"] * got["NUM_STEPS"] // got["NUM_MINIBATCHES"] == algo["minibatch_size"]
    assert (got["UPDATE_EPOCHS"], got["LR"], got["ENT_COEF"]) == (algo["num_epochs"], algo["learning_rate"],
                                                                  algo["ent_coef"])
    assert got["ACTIVATION"] == embodirl_cfg["policy"]["activation"]
    assert argv[argv.index("--eval-freq") + 1] == str(embodirl_cfg["eval"]["every_env_steps"])


@pytest.mark.slow  # fresh-process probes of embodirl-train or a script
def test_what_purejaxrl_cannot_express_is_named_not_dropped(embodirl_cfg):
    cfg = copy.deepcopy(embodirl_cfg)
    cfg["algo"]["lr_schedule"] = "adaptive"
    cfg["policy"].update(activation="elu", hidden_sizes=[128, 128])
    cfg["eval"]["every_env_steps"] = 30000
    argv, notes = race.purejaxrl_settings(cfg)
    got = _set_values(argv)
    assert got["ANNEAL_LR"] is False and got["ACTIVATION"] == "tanh"
    batch = got["NUM_ENVS"] * got["NUM_STEPS"]
    assert int(argv[argv.index("--eval-freq") + 1]) % batch == 0  # PureJaxRL evaluates between whole updates
    text = " ".join(notes)
    for word in ("adaptive", "elu", "[128, 128]", "30,000"):
        assert word in text, (word, notes)


def _fake(tmp_path, code, name="fake"):
    """A contender whose 'interpreter' runs ``code`` with the run dir as its working directory."""
    script = tmp_path / f"{name}.py"
    script.write_text(code)
    return race.Contender(name, name, "embodirl", lambda python, seed, run_dir, settings: [python, str(script)],
                          race._SOLVED, race._script_read)


SOLVES = """import json, time
time.sleep(0.05)
print("solved: seed 0 at 40960 env steps", flush=True)
json.dump({"runs": [{"b_wall_s": 0.5, "b_steps": 40960}], "summary": {"compile_s": 1.5, "import_s": 0.2}},
          open("result.json", "w"))
"""


def test_a_run_is_timed_from_outside_and_read_from_its_result(tmp_path):
    args = race.parse_args(["--rounds", "1"])
    row = race.run_once(_fake(tmp_path, SOLVES), sys.executable, 0, tmp_path / "run", {}, args)
    assert row["solved"] and row["rc"] == 0
    assert row["loop_steps_per_s"] == 81920 and row["compile_s"] == 1.5
    assert 0.05 <= row["start_to_solved_line_s"] <= row["start_to_exit_s"]
    assert len(row["load_avg"]) == 3
    assert "solved: seed 0" in (tmp_path / "run" / "output.log").read_text()


def test_a_run_that_crashes_is_not_solved_and_says_where_its_log_is(tmp_path):
    args = race.parse_args(["--rounds", "1"])
    row = race.run_once(_fake(tmp_path, "raise SystemExit(3)"), sys.executable, 0, tmp_path / "run", {}, args)
    assert not row["solved"] and row["rc"] == 3 and row["loop_steps_per_s"] is None
    assert str(tmp_path / "run" / "output.log") in row["error"]


def _result(rows, names, skipped=None):
    return dict(date="today", machine=race.machine(), command="python race.py", args=vars(race.parse_args([])),
                versions={"embodirl": {"embodirl": "0.1.0"}}, settings={}, skipped=skipped or {},
                summary=race.summarise(rows, names))


def _row(name, loop_s, steps, load=1.0, solved=True, compile_s=None):
    return dict(contender=name, solved=solved, loop_s=loop_s, env_steps=steps, start_to_solved_line_s=loop_s + 2,
                start_to_exit_s=loop_s + 3, loop_steps_per_s=round(steps / loop_s), compile_s=compile_s,
                import_s=None, load_avg=[load, load, load])


def test_the_table_has_a_row_per_contender_with_medians_ranges_and_the_load():
    rows = [_row("embodirl", 2.0, 163840, 1.0), _row("embodirl", 3.0, 163840, 2.0), _row("embodirl", 4.0, 204800, 3.0),
            _row("embodirl-compile", 1.0, 163840, compile_s=7.0), _row("cleanrl", 60.0, 122880, solved=False)]
    text = race.markdown(_result(rows, ["embodirl", "embodirl-compile", "cleanrl"], {"rl8": "--rl8-python not given"}))
    lines = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| ")}
    assert "| 3/3 | 3.00 (2.00-4.00) | 5.00 (4.00-6.00) | 163,840 (163,840-204,800) | 55k (51k-82k) |" in \
        lines["| embodirl (default)"]
    assert lines["| embodirl (default)"].endswith("| 1.00x | 2.00 (1.00-3.00) |")
    assert "| 7.00 | 0.33x |" in lines["| embodirl `compile=true`"]
    assert lines["| CleanRL ppo.py"].startswith("| CleanRL ppo.py | 0/1 | - |")
    assert "- rl8 skipped: --rl8-python not given." in text


@pytest.mark.slow  # fresh-process probes of embodirl-train or a script
def test_a_missing_peer_is_skipped_with_how_to_build_it(tmp_path):
    args = race.parse_args(["--contenders", "embodirl", "rl8", "--rl8-python", str(tmp_path / "none")])
    names, versions, _, skipped = race.prepare(args, race.interpreters(args))
    assert names == ["embodirl"] and "embodirl" in versions["embodirl"]
    assert "no such file" in skipped["rl8"] and "pip install torch rl8" in skipped["rl8"]


def test_peers_folder_fills_the_interpreters_not_given(tmp_path):
    args = race.parse_args(["--peers", str(tmp_path), "--sb3-python", "/x/python"])
    pythons = race.interpreters(args)
    assert pythons["purejaxrl"] == str(tmp_path / "jax" / "bin" / "python")
    assert pythons["sb3"] == "/x/python" and pythons["embodirl"] == sys.executable


def test_nothing_to_run_is_one_line_and_exit_2(tmp_path, capsys):
    code = race.main(["--contenders", "rl8", "--rl8-python", str(tmp_path / "none")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "peer_venvs.sh" in err[0]


@pytest.mark.slow  # fresh-process probes of embodirl-train or a script
def test_purejaxrl_script_refuses_an_unknown_setting_before_importing_jax():
    out = subprocess.run([sys.executable, str(BENCHMARKS / "purejaxrl_cartpole.py"), "--set", "NUM_ENV=256"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "NUM_ENVS" in out.stderr and "try --set" in out.stderr


@pytest.mark.parametrize("script", ["purejaxrl_cartpole.py", "rl8_cartpole.py", "cleanrl_ppo_cartpole.py"])
def test_a_peer_scripts_own_evaluation_cadence_is_embodirls_default(script):
    # race.py passes embodirl's cadence to each of them; run on its own, a script should judge alike
    import ast

    from tests.conftest import compose_config

    tree = ast.parse((BENCHMARKS / script).read_text())
    argparse_defaults = [next(ast.literal_eval(k.value) for k in n.keywords if k.arg == "default")
                         for n in ast.walk(tree) if isinstance(n, ast.Call)
                         and getattr(n.func, "attr", "") == "add_argument"
                         and n.args and getattr(n.args[0], "value", None) == "--eval-freq"]
    dataclass_defaults = [ast.literal_eval(n.value) for n in ast.walk(tree) if isinstance(n, ast.AnnAssign)
                          and getattr(n.target, "id", "") == "eval_freq"]
    assert argparse_defaults + dataclass_defaults == [compose_config([]).eval.every_env_steps]


def test_each_contender_runs_its_script_with_one_thread_and_its_seed():
    settings = {"purejaxrl-embodirl": ["--set", "NUM_ENVS=256"], "xla-cache": ["--xla-cache", "/cache"],
                "eval-freq": ["--eval-freq", "16384"]}
    argv = {name: c.argv("py", 7, Path("/run"), settings) for name, c in race.CONTENDERS.items()}
    assert argv["embodirl-compile"][-2:-1] == ["compile=true"] and "seed=7" in argv["embodirl"]
    assert "num_threads=1" in argv["embodirl"] and "compile=true" not in argv["embodirl"]
    assert argv["purejaxrl-embodirl"][-4:] == ["--set", "NUM_ENVS=256", "--xla-cache", "/cache"]
    assert "--set" not in argv["purejaxrl"]
    assert argv["purejaxrl"][-4:] == ["--eval-freq", "16384", "--xla-cache", "/cache"]
    assert "--eval-freq" not in argv["purejaxrl-embodirl"]  # its --set carries the cadence, rounded to its updates
    for name in ("rl8", "cleanrl"):
        assert argv[name][-2:] == ["--eval-freq", "16384"], name
    assert argv["cleanrl"][2:4] == ["--seed", "7"] and argv["rl8"][2:4] == ["--seeds", "7"]
    for name in ("purejaxrl", "rl8", "sb3", "cleanrl"):
        assert argv[name][4:6] == ["--threads", "1"], name


def test_the_documented_race_commands_parse(tmp_path):
    page = (BENCHMARKS.parent / "docs" / "benchmarks.md").read_text()
    commands = [shlex.split(line)[2:] for line in page.splitlines() if line.startswith("python benchmarks/race.py")]
    assert commands
    for argv in commands:
        if "--peers" in argv:  # the page's folder need not exist here
            argv[argv.index("--peers") + 1] = str(tmp_path)
        race.parse_args(argv)
