"""benchmarks/sample_sweep.py: the order of its runs and how it reads its arguments (no training here)."""
import importlib.util
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
_spec = importlib.util.spec_from_file_location("sample_sweep", BENCHMARKS / "sample_sweep.py")
sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep)


def test_alternate_runs_every_variant_in_turn_for_each_seed():
    assert sweep.run_order(["ppo", "grpo"], [0, 1], alternate=True) == [("ppo", 0), ("grpo", 0), ("ppo", 1),
                                                                         ("grpo", 1)]
    assert sweep.run_order(["ppo", "grpo"], [0, 1], alternate=False) == [("ppo", 0), ("ppo", 1), ("grpo", 0),
                                                                          ("grpo", 1)]
    assert sweep.parse_seeds("0-2,7") == [0, 1, 2, 7]
    assert sweep.parse_variant("grpo=algo=grpo algo.learning_rate=6e-3") == ("grpo", ["algo=grpo",
                                                                                     "algo.learning_rate=6e-3"])
