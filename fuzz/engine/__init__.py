"""The fuzz engine: budgeted Hypothesis rounds over a target's strategy (:mod:`.fuzzer`), one budget shared by
several targets in slices (:mod:`.schedule`), what they count
(:mod:`.stats`), how soak rounds treat failures already found (:mod:`.soak`), failures as exceptions and
records (:mod:`.outcomes`)."""

from parityfuzz.engine.fuzzer import Fuzzer, FuzzOptions, TargetRun, hypothesis_settings, interrupt_requested
from parityfuzz.engine.outcomes import CaseFailed, Failure
from parityfuzz.engine.soak import precondition, simplest_features
from parityfuzz.engine.stats import TargetStats

__all__ = ["CaseFailed", "Failure", "FuzzOptions", "Fuzzer", "TargetRun", "TargetStats",
           "hypothesis_settings", "interrupt_requested", "precondition", "simplest_features"]
