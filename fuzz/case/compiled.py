"""``torch.compile`` of the system under test: which backend, on what, before or after the parallel API.

The reference always runs eagerly: a compiled system must train as the eager reference does.  The forms:

- ``blocks_after``: ``module.compile()`` on each module at ``paths`` after the family's API is applied, as
  PyTorch's ``compiled_fsdp_test(compile_compute_on_module=...)`` does (``fully_shard(block)`` then
  ``block.compile()``: the blocks' compute compiled, the API's hooks around it eager);
- ``blocks_before``: ``module.compile()`` on them before the API is applied (the API then wraps compiled modules);
- ``model``: ``torch.compile`` around the whole model the API returns (DDP's compiled path, whose
  ``DDPOptimizer`` splits the graph at bucket boundaries; FSDP1 with ``use_orig_params=True``; a ``fully_shard``
  root).

Backends: ``aot_eager`` (Dynamo and AOTAutograd, run by eager kernels: where the API's hooks meet tracing) and
``inductor`` (generated C++ on a CPU; it reorders floating-point work, which the measured-noise oracle sees as
noise no larger than another summation order's, and draws random numbers its own way unless
``torch._inductor.config.fallback_random`` is set: the system sets it, as the reference's dropout masks are
eager ones).  Inductor is not drawn where the case computes in float16 or bfloat16: there it rounds otherwise than
eager by design (it elides the downcast-upcast pairs between fused operators; its attention kernels are not
eager's), which the eager reference cannot model (:func:`validate_compile`; aot_eager compiles those cases).

``restart``: a job restarted on a warm cache, as every production restart is.  The system under test trains, then
Dynamo is reset and the system is built and trained again, reading the compiled graphs the first run wrote to
Inductor's FX graph cache and AOTAutograd's cache (every rank's, in one directory of the run's own); the second
run is compared.  Inductor only: those caches serve inductor's compiler alone (``torch/_functorch/aot_autograd.py``
consults the AOTAutograd cache for a ``SerializableAOTDispatchCompiler``, inductor's; the FX graph cache is
Inductor's own).  Without it the ranks keep the two caches off, so no verdict depends on an earlier run.

Which forms a family's system supports is its record's (:attr:`parityfuzz.families.Family.compiles`).  A compiled
case must prove that it compiled: the ranks count the graphs the backend received, and the verdict of a run whose
system captured none on some rank says so (:func:`parityfuzz.judge.verify.verdict_from_outcomes`): it is judged as
the eager run it was, and counted apart, never passed as compiled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from parityfuzz.case.errors import check

if TYPE_CHECKING:
    from parityfuzz.case.core import Case

BACKENDS = ("aot_eager", "inductor")
FORMS = ("blocks_after", "blocks_before", "model")

#: Node kinds whose module ``module.compile()`` traces: the harness's own classes.  ``seq`` (``nn.Sequential``) and
#: the leaves built from ``torch.nn`` classes are left out: Dynamo skips a frame whose code lives in ``torch.nn``
#: (``torch/_dynamo/trace_rules.py``, the skip list's ``torch`` files), so ``nn.Sequential(...).compile()`` runs
#: eagerly and captures nothing (measured on torch 2.13: 0 graphs; a ``Block`` of the same layers: 1).
COMPILABLE_KINDS = ("block", "residual", "twice", "gate", "mlp", "attention", "scale")


@dataclass(frozen=True)
class Compile:
    """``backend`` ``""``: the system runs eagerly (the default).  ``paths``: the modules a ``blocks_*`` form
    compiles (empty for ``model``).  ``restart``: trained again on the graph caches its first run wrote."""

    backend: str = ""
    form: str = "blocks_after"
    paths: tuple[str, ...] = ()
    restart: bool = False

    def __bool__(self) -> bool:
        return bool(self.backend)

    @property
    def roots(self) -> tuple[str, ...]:
        """The module paths whose forwards run compiled, each with what is inside it: the root's (``""``) for the
        ``model`` form, else :attr:`paths`."""
        return ("",) if self.form == "model" else self.paths


def low_precision(case: Case) -> bool:
    """Whether the case computes in float16 or bfloat16 (autocast, or a mixed-precision policy's dtypes)."""
    from parityfuzz.case import dtypes

    low = max([dtypes.precision(case)] + ([case.train.autocast] if case.train.autocast else []),
              key=dtypes.MP_DTYPES.index)
    return low in ("float16", "bfloat16")


def compilable(case: Case) -> list[str]:
    """The module paths a ``blocks_*`` form may compile."""
    return [path for path, node in case.model.body.walk("body") if node.kind in COMPILABLE_KINDS]


def validate_compile(case: Case) -> None:
    """The form must be one the case's family supports (:attr:`parityfuzz.families.Family.compiles`), and the
    family of the case a checkpoint load resumes."""
    from parityfuzz import families

    c = case.compile
    if not c:
        check(c == Compile(), "compile.backend", "names no backend, so the case runs eagerly: leave compile out")
        return
    check(c.backend in BACKENDS, "compile.backend", f"must be one of {BACKENDS}, got {c.backend!r}")
    check(not case.train.overflow_in, "compile", "not with an overflow in one module's gradient (train.overflow_in): "
          "the harness's hook on that module's output would be traced into, or recompile, the compiled region")
    check(c.form in FORMS, "compile.form", f"must be one of {FORMS}, got {c.form!r}")
    check(not c.restart or c.backend == "inductor", "compile.restart",
          "only with inductor: the graph caches a restart reads serve inductor's compiler alone "
          "(torch/_functorch/aot_autograd.py: the AOTAutograd cache for a SerializableAOTDispatchCompiler)")
    check(not (c.restart and case.checkpoint), "compile.restart",
          "not with a checkpoint event: the harness restarts the whole run, not a resumed segment")
    for family in dict.fromkeys((case.family, case.resumed().family)):
        forms = families.get(family).compiles
        check(c.form in forms, "compile.form", f"the {family} family's system does not compile {c.form!r} "
              f"(it supports: {', '.join(forms) or 'none'})")
    # The state dict of a torch.compile'd model names its keys with OptimizedModule's "_orig_mod." prefix
    # (torch/_dynamo/eval_frame.py), which no load into an eager model takes: not a checkpoint the ways model.
    check(not (case.checkpoint and c.form == "model"), "compile.form",
          "the model form with a checkpoint event: its state dict's keys carry the '_orig_mod.' prefix")
    # Inductor does not round as eager does in low precision: "When two low precision operators are fused
    # together, Inductor will elide the downcast-upcast pairs" (torch/_inductor/config.py, emulate_precision_casts,
    # which restores pointwise casts only), and its kernels (an attention's) are not eager's.  The eager reference
    # cannot model that: measured one bfloat16 rounding step on a LayerNorm's weight gradient and on attention
    # outputs, reported as mismatches at float32-level noise.  aot_eager (eager kernels) compiles such cases.
    check(not (c.backend == "inductor" and low_precision(case)), "compile.backend",
          "inductor with float16/bfloat16 arithmetic (autocast or mixed precision): it rounds otherwise than the "
          "eager reference by design (torch/_inductor/config.py: it elides the downcast-upcast pairs between fused "
          "low-precision operators); use aot_eager")
    if c.form == "model":
        check(not c.paths, "compile.paths", "the model form compiles the whole model: no paths")
        return
    check(bool(c.paths), "compile.paths", f"the {c.form} form compiles the modules at these paths: name one")
    check(len(set(c.paths)) == len(c.paths), "compile.paths", "names a module twice")
    allowed = compilable(case)
    for i, path in enumerate(c.paths):
        check(path in allowed, f"compile.paths[{i}]", f"{path!r} is not a module torch.compile traces here "
              f"(one of the kinds {COMPILABLE_KINDS}: {', '.join(allowed) or 'none in this model'})")


def compile_features(case: Case) -> set[str]:
    c = case.compile
    if not c:
        return set()
    return {f"compile={c.form}", f"compile_backend={c.backend}"} | ({"compile_restart"} if c.restart else set())
