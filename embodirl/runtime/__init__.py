"""Process plumbing around one training run: the run's lifecycle (:mod:`.run`: lock, status, fate), the run
directory (:mod:`.rundir`), ``status.json`` (:mod:`.status`), signals and requeue (:mod:`.preemption`), process
groups (:mod:`.distributed`), Hydra resolvers (:mod:`.resolvers`) and the sweep callback (:mod:`.sweep`)."""
