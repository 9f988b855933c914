"""parityfuzz: property-based parity fuzzing of PyTorch distributed training."""

__version__ = "0.1.0"
