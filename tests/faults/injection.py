"""How a fault gets inside torch: a patch applied once per rank, undone by the rank's isolation snapshot."""

from __future__ import annotations

def _wrap_foreach_reduce(change) -> None:
    """Patch FSDP2's gradient reduction (``foreach_reduce`` as ``FSDPParamGroup.post_backward`` calls it):
    ``change(unsharded_grads, reduce_scatter_group, reduce_dtype)`` may edit the gradient list in place before
    the reduction and returns the reduce dtype to use."""
    import functools

    from torch.distributed.fsdp._fully_shard import _fsdp_param_group

    original = _fsdp_param_group.foreach_reduce

    @functools.wraps(original)
    def foreach_reduce(fsdp_params, unsharded_grads, group, stream, comm, orig_dtype, reduce_dtype, *rest):
        reduce_dtype = change(unsharded_grads, group, reduce_dtype)
        return original(fsdp_params, unsharded_grads, group, stream, comm, orig_dtype, reduce_dtype, *rest)

    _fsdp_param_group.foreach_reduce = foreach_reduce


class _Injected:
    """Injects a fault inside torch (:meth:`inject`) before the system under test is set up; the rank's
    isolation snapshot undoes it after the case."""

    def inject(self) -> None:
        raise NotImplementedError

    def setup(self, model):
        self.inject()
        super().setup(model)


def _patch_once(owner, name: str, make) -> None:
    """``owner.name = make(owner.name)``, unless a patch of this kind is in place already: a checkpoint event
    builds the system under test twice in one case, and a second wrapper would undo a swap or double a shift."""
    current = getattr(owner, name)
    if getattr(current, "_parityfuzz_fault", None) == make.__qualname__:
        return
    patched = make(current)
    patched._parityfuzz_fault = make.__qualname__
    setattr(owner, name, patched)


def _collective_replaced_in(owner, attr: str, collective: str, replacement, when) -> None:
    """Patch ``owner.<attr>`` so that, on calls where ``when(*args)`` holds, the ``torch.distributed.<collective>``
    it calls is ``replacement(real collective)`` (the isolation snapshot undoes the patch after the case)."""
    import functools

    import torch.distributed as dist

    original = getattr(owner, attr)

    @functools.wraps(original)
    def patched(*args):
        if not when(*args):
            return original(*args)
        real = getattr(dist, collective)
        setattr(dist, collective, replacement(real))
        try:
            return original(*args)
        finally:
            setattr(dist, collective, real)

    setattr(owner, attr, patched)


def _all_reduce_skipped_in(function: str, when) -> None:
    """Patch FSDP1's ``_runtime_utils.<function>(state, handle)`` so that, where ``when(state, handle)``, its
    ``dist.all_reduce`` calls do nothing (the gradient keeps this rank's value)."""
    from torch.distributed.fsdp import _runtime_utils

    _collective_replaced_in(_runtime_utils, function, "all_reduce", lambda real: lambda *args, **kwargs: None, when)
