"""The ``composable`` family: the composable APIs on one module tree, in a drawn order — FSDP2's
``fully_shard``, both ``replicate`` APIs torch ships (``torch.distributed._composable.replicate``, built on
DistributedDataParallel, and ``torch.distributed._composable.replicate_with_fsdp.replicate``, built on FSDP2's
machinery) and composable ``checkpoint`` — trained like DDP over the whole model.

Each data-parallel API manages its module's parameters except those of submodules another data-parallel call
took: a parameter's *manager* is the nearest module at or above it that a data-parallel API was applied to.
The order of the calls is the plan's.  ``fully_shard`` is documented to be applied bottom-up, and
``replicate_with_fsdp`` shares its initialisation, so no call may come after one of those two on an ancestor
(the DDP-based ``replicate`` initialises lazily at the first forward: applied to an ancestor first, it leaves
what the later calls take); ``checkpoint`` goes anywhere, as PyTorch's tests put it (after ``fully_shard`` on
an ancestor too).  Meshes: ``(dp_shard,)`` over all ranks, or HSDP's ``(dp_replicate, dp_shard)``,
which ``fully_shard`` takes whole; ``replicate_with_fsdp`` takes the mesh flattened to 1-D (it refuses more
dimensions) and the DDP-based ``replicate`` the default process group.

Refusals torch documents are expected errors: a ``replicate`` of either kind on a module ``fully_shard`` already
manages ("Cannot apply `replicate()` on a Module already managed by `fully_shard`"), and the same API twice on
one module (the composable contract: "can only be applied to a module once").
"""

from __future__ import annotations

from dataclasses import dataclass

from parityfuzz.case.core import Case, ExpectedError, Plan
from parityfuzz.case.errors import check
from parityfuzz.case.model import under
from parityfuzz.case.checkpoint import STATE_DICT_WAYS
from parityfuzz.families import Family
from parityfuzz.families.composable import rules
from parityfuzz.families.composable.rules import DATA_PARALLEL
from parityfuzz.run.calls import At, Call, Name, keywords

#: The APIs a plan applies: ``replicate`` is the DDP-based one, ``replicate_fsdp`` the FSDP-based one.
APIS = ("fully_shard", "replicate", "replicate_fsdp", "checkpoint")


@dataclass(frozen=True)
class Compose:
    """``api`` applied to the module at ``path`` (``""`` is the root); ``reshard_after_forward`` is
    ``fully_shard``'s."""

    path: str
    api: str = "fully_shard"
    reshard_after_forward: bool = True


@dataclass(frozen=True)
class ComposablePlan(Plan):
    """The composable API calls, in the order they are made.  ``no_sync``: on the non-last microbatches of a
    step, ``set_requires_gradient_sync(False)`` on every module a data-parallel API was applied to."""

    family = "composable"

    applies: tuple[Compose, ...] = (Compose(""),)
    no_sync: bool = False
    #: ``set_post_optim_event`` on the root after every optimizer step, as the fsdp2 family's (seed 000's
    #: ``test_post_optim_event``); the root must be ``fully_shard``'s ("the root FSDP module").
    post_optim_event: bool = False

    def data_parallel(self) -> dict[str, str]:
        """``{path: api}`` of the data-parallel calls that take effect (the first one on each module)."""
        out: dict[str, str] = {}
        for c in self.applies:
            if c.api in DATA_PARALLEL:
                out.setdefault(c.path, c.api)
        return out

    def manager(self, path: str) -> str | None:
        """The path of the module whose data-parallel API manages the parameters of the module at ``path``:
        itself or its nearest ancestor with one; None when no call reaches it."""
        managed = self.data_parallel()
        while True:
            if path in managed:
                return path
            if not path:
                return None
            path = path.rpartition(".")[0]

    def nestings(self) -> set[tuple[str, str]]:
        """``(inner api, outer api)`` for each data-parallel call on a module strictly inside another one's."""
        managed = self.data_parallel()
        return {(a, b) for p, a in managed.items() for q, b in managed.items() if p != q and under(p, (q,))}

    def calls(self, gated: bool) -> list[Call]:
        """The plan's torch calls (:mod:`parityfuzz.run.calls`) in its order: the system runs them, an exported
        script prints them.  The backend binds ``mesh`` (``fully_shard``'s, the case's mesh) and ``flat`` (its
        flattening to 1-D, ``replicate_with_fsdp``'s); ``gated``: a gate leaves parameters unused on some
        forwards, which the DDP-based ``replicate`` must be told (the reference is told alike)."""
        out = []
        for c in self.applies:
            if c.api == "fully_shard":
                kwargs = keywords(mesh=Name("mesh"), reshard_after_forward=c.reshard_after_forward)
            elif c.api == "replicate":
                kwargs = keywords(find_unused_parameters=gated)
            elif c.api == "replicate_fsdp":
                kwargs = keywords(mesh=Name("flat"))
            else:
                kwargs = ()
            out.append(Call(c.api, (At(c.path),), kwargs))
        return out

    def switch_calls(self) -> tuple[list[Call], list[Call]]:
        """The switches around each microbatch as calls, as :func:`parityfuzz.parts.fully_shard.switch_calls`
        gives FSDP2's (at a step's first microbatch, at every microbatch): the root's post-optimizer event,
        and, under ``no_sync``, gradient sync only on the last microbatch (``recurse=False`` for the FSDP-based
        APIs: the modules of their own calls are switched by those)."""
        first = [Call("set_post_optim_event", (At(""), Name("DEVICE")))] if self.post_optim_event else []
        every = [Call("set_requires_gradient_sync", (Name("last"),),
                      () if api == "replicate" else keywords(recurse=False), on=At(path))
                 for path, api in self.data_parallel().items()] if self.no_sync else []
        return first, every

    def refusal(self) -> ExpectedError | None:
        """The error torch documents for the first call it refuses, or None."""
        seen: dict[str, list[str]] = {}
        for c in self.applies:
            before = seen.setdefault(c.path, [])
            if c.api in before:
                return ExpectedError("AssertionError", "can only be applied to a module once")
            if c.api in ("replicate", "replicate_fsdp") and "fully_shard" in before:
                return ExpectedError("RuntimeError", r"Cannot apply `replicate\(\)` on a Module already managed "
                                                     "by `fully_shard`")
            before.append(c.api)
        return None


MESHES = (("dp_shard",), ("dp_replicate", "dp_shard"))


def reference(case: Case) -> str:
    return "ddp"


def expected_error(case: Case, device_type: str) -> ExpectedError | None:
    return case.plan.refusal()


def validate(case: Case) -> None:
    """The fields, then the validity rules of :mod:`parityfuzz.families.composable.rules` (the documented compositions)."""
    plan, model, t = case.plan, case.model, case.train
    kinds = dict(model.module_paths())
    check(bool(plan.applies), "plan.applies", "must apply at least one API")
    for i, c in enumerate(plan.applies):
        where = f"plan.applies[{i}]"
        check(c.api in APIS, f"{where}.api", f"must be one of {APIS}, got {c.api!r}")
        check(c.path in kinds, f"{where}.path", f"no module at path {c.path!r}")
        check(c.reshard_after_forward or c.api == "fully_shard", f"{where}.reshard_after_forward",
              "is fully_shard's: keep it True for other APIs")
    rules.check_calls(plan)
    if plan.refusal():
        return  # the case ends at the refused call: nothing trains
    rules.check_training(case)
    check(not t.nonroot, "train.nonroot", "not drawn for the composable family")
    check(not model.per_rank_flow(), "model.body", "per-rank control flow is not drawn for the composable family")
    check(not (plan.no_sync and t.microbatches == 1), "plan.no_sync", "needs more than one microbatch")
    check(not plan.post_optim_event or plan.data_parallel().get("") == "fully_shard", "plan.post_optim_event",
          "is FSDPModule.set_post_optim_event, which sets 'a post-optimizer-step event for the root FSDP module': "
          "needs fully_shard on the root")


def features(case: Case) -> set[str]:
    plan = case.plan
    tags = {f"api={c.api}" for c in plan.applies}
    tags.update(f"{inner}<{outer}" for inner, outer in plan.nestings())  # an API inside another's subtree
    order = [c for c in plan.applies if c.api in DATA_PARALLEL]
    if any(under(b.path, (a.path,)) and a.path != b.path for i, a in enumerate(order) for b in order[i + 1:]):
        tags.add("order=top-down")
    if any(c.api == "checkpoint" and any(d.path == c.path and d.api != "checkpoint" for d in plan.applies)
           for c in plan.applies):
        tags.add("checkpoint+dp")
    if any(not c.reshard_after_forward for c in plan.applies):
        tags.add("reshard=False")
    if plan.no_sync:
        tags.add("no_sync")
    if plan.post_optim_event:
        tags.add("post_optim_event")
    if plan.refusal():
        tags.add(f"refused={plan.refusal().type}")
    return tags


def describe(case: Case) -> tuple[dict[str, str], list[str]]:
    plan = case.plan
    notes: dict[str, list[str]] = {}
    for i, c in enumerate(plan.applies):
        arg = ", reshard_after_forward=False" if not c.reshard_after_forward else ""
        notes.setdefault(c.path, []).append(f"#{i + 1} {c.api}({arg.lstrip(', ')})")
    lines = ["calls in order: " + "; ".join(f"{c.api}({c.path or '<root>'})" for c in plan.applies)]
    if plan.no_sync:
        lines.append("set_requires_gradient_sync(False) on every data-parallel module on non-last microbatches")
    if plan.post_optim_event:
        lines.append("set_post_optim_event on the root with an event recorded after each optimizer step")
    return {path: ", ".join(parts) for path, parts in notes.items()}, lines


#: The training-loop dimensions this family does not take (:attr:`parityfuzz.families.Family.unsupported`).
UNSUPPORTED = {
    "nonroot": "not drawn yet (harness): its strategy offers no module for a pass of its own",
    "reentrant": "torch.distributed._composable.checkpoint has no reentrant form (it runs the non-reentrant "
                 "implementation only)",
}

FAMILY = Family(
    name="composable",
    unsupported=UNSUPPORTED,
    plan_type=ComposablePlan,
    meshes=MESHES,
    system="composable",
    strategy="parityfuzz.families.composable.strategy",
    reference=reference,
    validate=validate,
    features=features,
    describe=describe,
    expected_error=expected_error,
    target=(
        "fully_shard, both replicate APIs and composable checkpoint on one module tree, in any order the "
        "documentation allows, must train exactly like DDP, and refuse what torch documents refusing."
    ),
    systems={
        "composable": "parityfuzz.families.composable.system:ComposableSystem",
    },
    export="parityfuzz.families.composable.export",
    patchable_classes=(
        ("torch.distributed._composable.replicate", "_ReplicateState"),
    ),
    compiles=("blocks_after", "blocks_before", "model"),
    checkpoint_ways=STATE_DICT_WAYS,
    rules=rules.RULES,
    missing={"seed_grids": "PyTorch's composable tests' grids are not transcribed yet"},
    resume="parityfuzz.families.composable.strategy:resumed",
)
