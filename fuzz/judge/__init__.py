"""Judge: from two runs' traces to a :mod:`.verdict`.  :mod:`.verify` runs a case on the executor and hands the
traces to the pure comparison of :mod:`.oracle` (tolerances from the rounding noise measured for that case);
:mod:`.expected` judges the cases torch must refuse; :mod:`.origin` says where a divergence begins.  The
oracle's figures are measured on clean cases by :mod:`parityfuzz.frontends.calibrate`."""
