"""Activation checkpointing applied: a free function over plain values, which systems call and exported scripts
embed by source (one implementation)."""

from __future__ import annotations

import functools

import torch.nn as nn

from parityfuzz.systems.base import resolve


def apply_checkpoint(model: nn.Module, path: str, api: str = "composable", reentrant: bool = False,
                     **kwargs) -> None:
    """Activation-checkpoint the module at ``path`` with ``api`` (``composable``, ``wrapper``, ``apply``),
    reentrant where asked (the wrapper APIs); ``kwargs`` go to the checkpoint function."""
    if api == "composable":
        from torch.distributed._composable import checkpoint

        checkpoint(resolve(model, path), **kwargs)
        return
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl, apply_activation_checkpointing, checkpoint_wrapper)

    if reentrant:
        kwargs = {**kwargs, "checkpoint_impl": CheckpointImpl.REENTRANT}
    if api == "apply":
        target = resolve(model, path)
        apply_activation_checkpointing(model, checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper, **kwargs),
                                       check_fn=lambda m: m is target)
        return
    parent_path, _, name = path.rpartition(".")
    parent = resolve(model, parent_path)
    setattr(parent, name, checkpoint_wrapper(getattr(parent, name), **kwargs))

