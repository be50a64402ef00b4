"""Process plumbing around one training run: the run directory's lock and config checks (:mod:`.rundir`),
``status.json`` (:mod:`.status`), checkpoint files (:mod:`.checkpoint`), reading and atomically writing run files
(:mod:`.files`), signals and requeue (:mod:`.preemption`), the process's rank (:mod:`.rank`), process groups
(:mod:`.distributed`) and how numbers and durations read to a person (:mod:`.formatting`). The run's lifecycle
itself is :mod:`embodirl.app.run`."""
