"""Activation checkpointing in an exported script: :func:`.apply.apply_checkpoint`'s own source, and its calls."""

from __future__ import annotations

import inspect

IMPORTS = "import functools\n"


def definitions(checkpoints) -> str:
    """What the script's calls run (the harness's own function, copied), where there are ``checkpoints``."""
    from parityfuzz.parts.activation_checkpoint import apply

    return inspect.getsource(apply.apply_checkpoint) + "\n\n" if checkpoints else ""


def call(c, model: str = "model") -> str:
    """The call that checkpoints plan entry ``c`` of ``model`` (a script variable), as the systems make it."""
    from parityfuzz.parts.activation_checkpoint import checkpoint_call
    from parityfuzz.run.calls import source

    return source(checkpoint_call(c, model))
