"""After the run: the one-screen summary (:mod:`.summary`), sweep reports (:mod:`.report`), learning curves
(:mod:`.curves`) and the statistics they use (:mod:`.stats`: IQM, bootstrap intervals, number formatting)."""
