"""The fuzz engine: budgeted Hypothesis rounds over a target's strategy (:mod:`.fuzzer`), what they count
(:mod:`.stats`), how soak rounds treat failures already found (:mod:`.soak`), failures as exceptions and
records (:mod:`.outcomes`)."""

from parityfuzz.engine.fuzzer import Fuzzer, FuzzOptions, hypothesis_settings, interrupt_requested
from parityfuzz.engine.outcomes import CaseFailed, Failure
from parityfuzz.engine.soak import precondition, simplest_features
from parityfuzz.engine.stats import TargetStats

__all__ = ["CaseFailed", "Failure", "FuzzOptions", "Fuzzer", "TargetStats",
           "hypothesis_settings", "interrupt_requested", "precondition", "simplest_features"]
