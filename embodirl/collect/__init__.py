"""Collection: the rollout schema, the collector, the evaluator and episode statistics."""
