"""Hypothesis strategies that generate parity cases: generic parts (one module per concern) and one
package per family (``strategies/<family>/``), reached through :func:`cases`."""

from parityfuzz.strategies.cases import cases
from parityfuzz.strategies.meshes import world_sizes
from parityfuzz.strategies.models import bodies, models
from parityfuzz.strategies.perturbation import delays
from parityfuzz.strategies.training import training

__all__ = ["bodies", "cases", "delays", "models", "training", "world_sizes"]
