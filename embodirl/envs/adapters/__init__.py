"""Adapters for simulators of others: gymnasium ids and torch-batched vector envs."""
