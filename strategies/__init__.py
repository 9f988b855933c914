"""Hypothesis strategies that generate parity cases (one module per concern)."""

from strategies.cases import cases
from strategies.meshes import meshes, world_sizes
from strategies.models import bodies, models
from strategies.perturbation import delays
from strategies.training import training
from strategies.wrapping import plans

__all__ = ["bodies", "cases", "delays", "meshes", "models", "plans", "training", "world_sizes"]
