"""The per-rank training loop that drives any system and records its trace."""

from __future__ import annotations

import contextlib
import os
import time

import numpy as np
import torch

from parityfuzz.case import Case
from parityfuzz.case.dtypes import EPS, unpinned_dtype
from parityfuzz.judge.tolerance import UNPINNED_ULPS
from parityfuzz.run.activations import Probe
from parityfuzz.run.build import ForwardClock, batch_for, build_model, target_for
from parityfuzz.run.collectives import CollectiveCounter
from parityfuzz.run.record import dtype_name, record_tensors
from parityfuzz.run.seeds import forward_seed_key, gradient_perturbation_key, perturbation_key
from parityfuzz.run.trace import ELSEWHERE, RankTrace, Rec, module_of
from parityfuzz.run import scaling
from parityfuzz.systems import RankContext, system_class
from parityfuzz.systems.base import resolve


def perturb(model: torch.nn.Module, seed: int, ulps: float = 2.0) -> None:
    """Scale every weight by ``1 +- ulps * eps``: the size of difference two correct systems can make."""
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            sign = torch.randint(0, 2, p.shape, generator=g).to(p.dtype) * 2 - 1
            p.mul_(1 + ulps * torch.finfo(p.dtype).eps * sign)


def perturb_gradients(named_params, seed: int, ulps: float = 2.0, unpinned_eps: float = 0.0) -> None:
    """Move every element of every gradient by ``+- ulps * eps`` at its module's scale (the largest gradient
    magnitude among the module's parameters): what another order of summation does.  Unlike the weight
    perturbation it reaches the rounding residue of cancelled elements (an analytically zero gradient, a
    near-zero one), which Adam's ``eps`` term can amplify to a sizable update.

    ``unpinned_eps``: the machine epsilon of the dtype whose rounding the reference does not pin (0: none;
    :func:`parityfuzz.case.dtypes.unpinned_dtype`).  The oracle lets the system's gradients differ by
    ``UNPINNED_ULPS`` of it at their scale (:mod:`parityfuzz.judge.tolerance`), so the perturbation moves them that
    far too, and the noise measured downstream is what such a difference does: Adam turns a near-zero gradient
    element whose sign the compiled rounding flips into an update of twice the learning rate (a 10-minute run
    met it: FSDP1 under bf16, compiled by aot_eager, one of 25 weight elements 2 x lr off after step 0, every
    gradient within the floor).

    A DTensor gradient (a tensor-parallel reference's) is perturbed as the whole tensor it stands for: the signs
    are drawn for its global shape, alike on every rank, and each rank adds its own placement's part."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    def magnitude(grad):
        top = grad.abs().max()
        return top.full_tensor() if isinstance(top, DTensor) else top

    grads = [(name, p.grad) for name, p in named_params if p.grad is not None and p.grad.numel()]
    scales: dict[str, torch.Tensor] = {}
    for name, grad in grads:
        key = module_of(name)
        scales[key] = torch.maximum(scales[key], magnitude(grad)) if key in scales else magnitude(grad)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, grad in grads:
            sign = torch.randint(0, 2, grad.shape, generator=g).to(grad.dtype) * 2 - 1
            size = ulps * torch.finfo(grad.dtype).eps + UNPINNED_ULPS * unpinned_eps
            step = sign * size * scales[module_of(name)].to(grad.dtype).cpu()
            if isinstance(grad, DTensor):
                grad.add_(distribute_tensor(step.to(grad.device), grad.device_mesh, grad.placements))
            else:
                grad.add_(step.to(grad.device))


def _counts(comms: CollectiveCounter | None) -> dict:
    """``{op name: count}`` (empty where nothing was counted)."""
    return {} if comms is None else dict(sorted(comms.counts.items()))


def reset_rank_state(seed: int) -> None:
    """Every system starts from the same process state."""
    torch.manual_seed(seed)
    torch.set_default_dtype(torch.float32)
    torch.set_grad_enabled(True)


def forward_seed(case: Case, rank: int, step: int, micro: int) -> int:
    """The RNG seed of one forward: differs per data-parallel rank, step and microbatch, equal across systems
    and across the ranks of a tensor-parallel group."""
    return forward_seed_key(case.seed, case.mesh.dp_index(rank), step, micro)


#: Roles a rank can run: the reference, the system under test, and the reference started from weights
#: perturbed at rounding level and with every reduced gradient perturbed likewise (run to measure the rounding noise of a case; see ``parityfuzz.judge.oracle``).
ROLES = ("reference", "system", "perturbed_reference")


def run_system(case: Case, role: str, ctx: RankContext, record: bool = True, segment: int | None = None,
               scratch: str = "", probe: bool = False) -> RankTrace:
    """Train ``case`` with the system playing ``role`` (one of :data:`ROLES`) on this rank.

    ``record=False`` trains the same way but keeps no gradients or parameters (the benchmark's bare loop).
    With a checkpoint event (:mod:`parityfuzz.case.checkpoint`) the system saves after the event's step into
    ``scratch`` (a directory every rank sees), a fresh system of the resumed case loads and trains on; the
    reference does the same through its trusted path where the load reshards, and otherwise trains on
    uninterrupted.  ``segment`` 0 trains up to the save, 1 from the load (a resumed case of another world size
    runs in another pool); None both.  Right after the load, a pass ``(step, "loaded")`` records the loaded
    parameters (no loss, nothing stepped).  ``probe=True`` also records every module's forward output and output
    gradient (:mod:`parityfuzz.run.activations`) and counts every pass's collectives, whatever the system: what locating
    a divergence's origin needs (:mod:`parityfuzz.judge.origin`).
    """
    role, _, sample = role.partition("/")  # "perturbed_reference/<n>": the n-th sample of the noise
    if role not in ROLES or (sample and (role != "perturbed_reference" or not sample.isdigit())):
        raise ValueError(f"unknown role {role + ('/' + sample if sample else '')!r}")
    run = _Run(case, role, int(sample or 0), ctx, record, probe)
    event = case.checkpoint
    if role == "system" and case.compile.restart:  # (never with a checkpoint event: validate_compile)
        return _restarted(run, scratch)
    if not event:
        run.start(case, 0)
        run.train(0, case.train.steps)
        return run.trace
    from parityfuzz import checkpoint
    from parityfuzz.case.checkpoint import reshards

    # Where nothing reshards the reference trains on uninterrupted, unless the event rolls back: then every system
    # trains on past the save and loads the checkpoint into itself at rollback_at (its own segment, one pool).
    turns = role == "system" or reshards(case) or bool(event.rollback_at)
    resume = event.rollback_at or event.step
    directory = os.path.join(scratch, role + (f"-{sample}" if sample else ""))
    if segment in (None, 0):
        run.start(case, 0)
        run.train(0, event.step)
        if turns:
            run.note_violations(checkpoint.save(run.system, case, directory, trusted=role != "system"))
    if segment in (None, 1):
        broken = []
        if event.rollback_at:
            run.train(event.step, resume)
            run.system.before_live_load()
        elif turns:
            run.start(case.resumed(), event.step)
        if turns:
            broken = checkpoint.load(run.system, case, directory, trusted=role != "system")
        else:  # no checkpoint keeps gradients: the resumed system starts without them, and so does the reference
            run.system.optim.zero_grad(set_to_none=True)
        run.record_loaded(resume)
        run.note_violations(broken)
        run.train(resume, case.train.steps)
    return run.trace


def _restarted(run: _Run, scratch: str) -> RankTrace:
    """A compiled system under test trained, then restarted on a warm cache: built anew (its :class:`Compiler`
    resets Dynamo) and trained again, reading the compiled graphs the first run cached in ``scratch`` (a directory
    every rank sees); the second run is recorded."""
    from parityfuzz.systems.compiled import graph_caches_in

    case = run.case
    with graph_caches_in(os.path.join(scratch, "graphs")):
        first = _Run(case, run.role, run.sample, run.ctx, record=False)
        first.start(case, 0)
        first.train(0, case.train.steps)
        first.system = None
        run.start(case, 0)
        run.train(0, case.train.steps)
    return run.trace


class _Run:
    """One role's training on this rank: its system (replaced at a checkpoint event's load) and its trace."""

    def __init__(self, case: Case, role: str, sample: int, ctx: RankContext, record: bool, probe: bool = False):
        self.case, self.role, self.ctx, self.record = case, role, ctx, record
        self.probing = probe
        self.probe: Probe | None = None
        self.sample = sample
        self.trace = RankTrace()
        self.clock = ForwardClock()
        self.system = None

    def start(self, case: Case, step: int) -> None:
        """Build the model and apply ``case``'s system to it, as it stands at ``step`` (frozen parameters)."""
        with self.timed("setup"):
            self._start(case, step)

    @contextlib.contextmanager
    def timed(self, what: str):
        """Add the seconds the block takes to the trace's :attr:`RankTrace.seconds` under ``what``."""
        began = time.perf_counter()
        try:
            yield
        finally:
            self.trace.seconds[what] = self.trace.seconds.get(what, 0.0) + time.perf_counter() - began

    def _start(self, case: Case, step: int) -> None:
        self.system = None
        cls = system_class(case.system_name() if self.role == "system" else case.reference_name())
        reset_rank_state(case.seed)
        self.clock = ForwardClock()
        system = cls(case, self.ctx, self.role)
        model = build_model(case, self.ctx.rank, self.clock)
        if self.role == "perturbed_reference" and step == 0:
            if case.train.to_float64:
                model = model.to(torch.float64)  # perturb what is trained, at its own precision
            perturb(model, perturbation_key(case.seed, self.sample))
        # Frozen before the parallel API is applied, as users do; a system resumed at a checkpoint's step is frozen
        # as the saved one was (after the step before), and unfreezes at the step as the uninterrupted one does.
        for name, p in model.named_parameters():
            p.requires_grad_(not case.train.frozen_at(name, max(step - 1, 0)))
        system.setup(model)
        self.system = system
        if self.probing:
            if self.probe is not None:
                self.probe.remove()
            self.probe = Probe(system.inner(), self.ctx)

    def note_violations(self, violations: list[tuple]) -> None:
        """What a checkpoint save or load broke, at the last pass recorded (:attr:`RankTrace.violations`)."""
        self.trace.violations += [(len(self.trace.passes) - 1, *v) for v in violations]

    def record_loaded(self, step: int) -> None:
        """The pass right after a checkpoint load: the parameters and buffers as loaded."""
        self.trace.passes.append((step, "loaded"))
        self.trace.losses.append(None)
        if self.record:
            self.trace.grads.append({})
            self.trace.local_grad_scales.append({})
            self.trace.skipped.append(False)
            self.trace.params.append(self._params())
        self.trace.collectives.append({})
        self.trace.activations.append({})

    def _params(self) -> dict:
        system = self.system
        return self._record("param", {**system.parameters(), **system.buffers()})

    def _record(self, what: str, tensors: dict) -> dict:
        """This rank's records of ``tensors`` (``what``: ``"grad"`` or ``"param"``), and :data:`ELSEWHERE` for
        those the system says other ranks hold."""
        system = self.system
        with self.timed("record"):
            out = record_tensors(tensors, self.ctx, system.rank_local())
        out.update(dict.fromkeys(system.elsewhere(what), ELSEWHERE))
        return out

    def finish_pass(self, step: int, phase: str, losses: list[torch.Tensor], trains: bool = True) -> None:
        """Record a pass (its losses summed over microbatches) and, unless it is an evaluation, step."""
        system, trace, case = self.system, self.trace, self.case
        trace.passes.append((step, phase))
        trace.activations.append(self.probe.take() if self.probe is not None else {})
        kinds = "|".join(dict.fromkeys(dtype_name(x) for x in losses))
        trace.losses.append(Rec(kinds, np.array(sum(float(x) for x in losses), dtype=np.float64)))
        # Under loss scaling the gradients are recorded after the step (unscaled, as the optimizer used them), and
        # not at all where the scaler skipped it (they are the overflow's inf and NaN, applied nowhere); the local
        # gradients the hooks saw were scaled, and are unscaled here (else they would loosen the floor by the scale).
        scaled = trains and system.scaler is not None
        local = system.local_gradient_scales()
        if scaled:
            factor = system.scaler.get_scale()  # the scale of this step's backwards (updated by the step below)
            local = {name: value / factor for name, value in local.items()}
        if self.record and not scaled:
            trace.grads.append(self._record("grad", system.gradients()) if trains else {})
        if trains and self.role == "perturbed_reference":
            perturb_gradients(system.named_parameters(),
                              gradient_perturbation_key(case.seed, self.sample, len(trace.passes)),
                              unpinned_eps=EPS.get(unpinned_dtype(case), 0.0))
        skipped = system.optimizer_step() if trains else False
        if self.record:
            if scaled:  # (not where some rank skipped: gathering the gradients takes every rank)
                trace.grads.append({} if scaling.any_rank(skipped, self.ctx.device)
                                   else self._record("grad", system.gradients()))
            trace.local_grad_scales.append({} if skipped else local)
            trace.skipped.append(bool(skipped))
            trace.params.append(self._params() if trains else {})

    def counting(self):
        """Count the collectives of a pass's forwards and backwards, where the system asks for it; never in a
        compiled system (Dynamo does not trace under the counter's dispatch mode: it would run eagerly)."""
        counts = (self.system.count_collectives or self.probing) and self.system.compiler is None
        return CollectiveCounter() if counts else contextlib.nullcontext(None)

    def train(self, first: int, stop: int) -> None:
        """Steps ``first`` to ``stop - 1``, each under the case in force at it (:meth:`Case.at_step`); then what a
        compiled system's compiler captured is added to the trace."""
        self._steps(first, stop)
        if self.system.compiler is not None:
            for key, n in self.system.compiler.take_stats().items():
                self.trace.compiled[key] = self.trace.compiled.get(key, 0) + n

    def _steps(self, first: int, stop: int) -> None:
        system, trace, ctx, clock = self.system, self.trace, self.ctx, self.clock
        n = self.case.train.microbatches
        for step in range(first, stop):
            case = self.case.at_step(step)
            if step and case.train.unfreezes_at(step):
                system.unfreeze({name for name, _ in system.named_parameters()
                                 if case.train.frozen_at(name, step - 1) and not case.train.frozen_at(name, step)})
            system.zero_grad(step)
            losses = []
            with self.counting() as comms:
                for micro in range(n):
                    clock.set(step, micro, n)
                    torch.manual_seed(forward_seed(case, ctx.rank, step, micro))  # Dropout masks, alike in both
                    spike = case.train.spike(step, case.mesh.dp_index(ctx.rank), micro)
                    # (the overflow in one module's output gradient, or in the loss)
                    hook = scaling.spike_output(resolve(system.inner(), case.train.overflow_in), spike) \
                        if case.train.overflow_in and spike != 1 else None
                    system.spike = 1.0 if hook is not None else spike
                    with system.microbatch(micro, last=micro == n - 1):
                        losses.append(system.forward_backward(batch_for(case, ctx.rank, step, ctx.device, micro),
                                                              target_for(case, ctx.rank, step, ctx.device, micro)))
                    if hook is not None:
                        hook.remove()
            trace.collectives.append(_counts(comms))
            self.finish_pass(step, "", losses)
            if case.train.nonroot:  # a second pass, through only a non-root module (as after a root step)
                path = case.train.nonroot
                system.zero_grad(step)
                torch.manual_seed(forward_seed(case, ctx.rank, step, n))
                with self.counting() as comms:
                    loss = system.forward_backward(batch_for(case, ctx.rank, step, ctx.device, n, path),
                                                   target_for(case, ctx.rank, step, ctx.device, n, path), path)
                trace.collectives.append(_counts(comms))
                self.finish_pass(step, f"non-root {path}", [loss])
            if case.train.eval:  # an evaluation forward between steps: its loss is compared, nothing is stepped
                clock.set(step, 0, n)
                with self.counting() as comms:
                    loss = system.evaluate(batch_for(case, ctx.rank, step, ctx.device, n + 1),
                                           target_for(case, ctx.rank, step, ctx.device, n + 1))
                trace.collectives.append(_counts(comms))
                self.finish_pass(step, "eval", [loss], trains=False)
