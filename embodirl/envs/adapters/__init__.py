"""Adapters for simulators of others: gymnasium ids, torch-batched vector envs, MuJoCo Playground (MJX) and
Genesis (the last two imported only when selected: they need their extras)."""
