"""Activation checkpointing of a module, as a plan entry every family with checkpoints holds (``plan.checkpoints``).

Spec here (torch- and Hypothesis-free); validity rules in :mod:`.rules`, the reentrant dimension's strategy in
:mod:`.strategy`, the torch function in :mod:`.apply` (which the export embeds by source).
"""

from __future__ import annotations

from dataclasses import dataclass

from parityfuzz.run.calls import Call, Name, keywords

#: The checkpointing APIs: ``torch.distributed._composable.checkpoint``, ``checkpoint_wrapper``,
#: ``apply_activation_checkpointing``.
CHECKPOINT_APIS = ("composable", "wrapper", "apply")


@dataclass(frozen=True)
class ActivationCheckpoint:
    """Activation checkpointing of the module at ``path``.

    ``api``: ``composable`` (``torch.distributed._composable.checkpoint``) or
    ``wrapper`` (``checkpoint_wrapper``, which inserts a ``CheckpointWrapper``
    into the module tree; not for the root) or ``apply``
    (``apply_activation_checkpointing`` selecting this module; not for the root).  ``before``: applied before
    the family's parallel API (else after).  ``reentrant``: ``checkpoint_impl=CheckpointImpl.REENTRANT``, torch's
    ``checkpoint(use_reentrant=True)`` (the wrapper APIs only: the composable API has no reentrant form).
    """

    path: str
    api: str = "composable"
    before: bool = True
    reentrant: bool = False


def checkpoint_tags(checkpoints) -> set[str]:
    """Feature tags of activation checkpoints: API, before or after the parallel API, reentrant or not."""
    return {f"ckpt={c.api}/{'before' if c.before else 'after'}{'/reentrant' if c.reentrant else ''}"
            for c in checkpoints}


def checkpoint_call(c: ActivationCheckpoint, model: str = "model"):
    """The call that checkpoints plan entry ``c`` of ``model`` (a name its backend binds): to
    :func:`parityfuzz.parts.activation_checkpoint.apply.apply_checkpoint`, which systems run and scripts copy."""
    api = (c.api,) if c.api != "composable" or c.reentrant else ()
    return Call("apply_checkpoint", (Name(model), c.path, *api), keywords(reentrant=True) if c.reentrant else ())
