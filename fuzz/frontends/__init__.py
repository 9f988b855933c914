"""Front ends: what users run.  The pytest plugin (:mod:`.plugin`: options, the fuzz session, the summary), the
``parityfuzz`` command (:mod:`.cli`), one case replayed and explained (:mod:`.repro`, also ``python -m
fuzz.repro``), a case printed (:mod:`.show`), a run's HTML report (:mod:`.report`) and the benchmark
(:mod:`.bench`), the oracle measured on clean cases (:mod:`.calibrate`)."""
