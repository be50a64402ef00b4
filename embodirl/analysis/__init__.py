"""After the run: the one-screen summary (:mod:`.summary`), sweep reports (:mod:`.report`), learning curves
(:mod:`.curves`), frames of evaluation videos (:mod:`.frames`) and the statistics they use (:mod:`.stats`: IQM,
bootstrap intervals, number formatting)."""
