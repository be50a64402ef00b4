"""The schemas of embodirl's own components, imported together so a ``_target_`` finds its schema without
importing the component (:func:`embodirl.config.schema.schema_for`)."""

from embodirl.config import algos, envs, optim, policies, training

__all__ = ["algos", "envs", "optim", "policies", "training"]
