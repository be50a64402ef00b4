"""Process plumbing around one training run: the run directory's lock and config checks (:mod:`.rundir`),
``status.json`` (:mod:`.status`), checkpoint files (:mod:`.checkpoint`), reading and atomically writing run files
(:mod:`.files`), signals and requeue (:mod:`.preemption`), the process's rank (:mod:`.rank`) and process groups
(:mod:`.distributed`). The run's lifecycle itself is :mod:`embodirl.app.run`."""
