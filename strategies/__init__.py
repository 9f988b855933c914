"""Hypothesis strategies that generate parity cases: generic parts (one module per concern) and one
package per family (``strategies/<family>/``), reached through :func:`cases`."""

from strategies.cases import cases
from strategies.meshes import world_sizes
from strategies.models import bodies, models
from strategies.perturbation import delays
from strategies.training import training

__all__ = ["bodies", "cases", "delays", "models", "training", "world_sizes"]
