"""Composable plans: which modules get which composable API, and the order of the calls.

Each non-root module gets a data-parallel API on a coin (1 in 3), the root on another (it must when some
parameter would otherwise be left to no API); up to two modules are checkpointed.  A case draws which
``replicate`` it uses: the DDP-based one, the FSDP-based one, or both.  The calls are then drawn in any order
that keeps the documented bottom-up rule (no call after a ``fully_shard`` or ``replicate_with_fsdp`` on an
ancestor): a permutation of the bottom-up order, with each eager call pulled after the calls on its subtree.
A coin of 1 in 8 adds a refusal torch documents: a ``replicate`` after ``fully_shard`` on one module, or an API
applied twice.

Shrinking: toward ``fully_shard`` alone, fewer calls (the root's only), the bottom-up order, no checkpoint,
``reshard_after_forward=True``, no refusal.
"""

from __future__ import annotations

from hypothesis import strategies as st

from parityfuzz.case import ModelSpec
from parityfuzz.families.composable import ComposablePlan, Compose
from parityfuzz.families.composable.rules import EAGER
from parityfuzz.strategies.coins import RARE

#: Which replicate APIs a case may use, in shrinking order.
REPLICATES = (("replicate_fsdp",), ("replicate",), ("replicate", "replicate_fsdp"))


def _bottom_up(calls: list[Compose]) -> list[Compose]:
    """Deepest modules first, the root last (the order FSDP2's documentation asks for)."""
    return sorted(calls, key=lambda c: -c.path.count(".") - (c.path != ""))


def keep_bottom_up(order: list[Compose]) -> list[Compose]:
    """``order`` with each eager call (``fully_shard``, ``replicate_with_fsdp``) moved after every
    data-parallel call on a module strictly inside its own, the rest kept in place."""
    out: list[Compose] = []
    done: set[int] = set()

    def emit(i: int) -> None:
        if i in done:
            return
        c = order[i]
        if c.api in EAGER:
            for j, d in enumerate(order):
                if d.api != "checkpoint" and d.path != c.path and (c.path == "" or d.path.startswith(c.path + ".")):
                    emit(j)
        done.add(i)
        out.append(c)

    for i in range(len(order)):
        emit(i)
    return out


@st.composite
def plans(draw, model: ModelSpec) -> ComposablePlan:
    pool = ("fully_shard",) + draw(st.sampled_from(REPLICATES))
    excluded = {"", "inp", "head"} if model.tie_head else {""}
    paths = [p for p, _ in model.module_paths() if p not in excluded]
    calls = []
    for path in paths:
        if draw(st.sampled_from((False, False, True))):
            api = draw(st.sampled_from(pool))
            calls.append(Compose(path, api, reshard_after_forward=api != "fully_shard" or draw(st.booleans())))
    root = draw(st.sampled_from(pool + ("",)))
    covered = ComposablePlan(applies=tuple(calls) or (Compose("", "checkpoint"),))
    if not root and any(covered.manager(m) is None for m in model.param_modules()):
        root = "fully_shard"
    if root:
        calls.append(Compose("", root, reshard_after_forward=root != "fully_shard" or draw(st.booleans())))
    # The DDP-based replicate refuses a module left without parameters (all taken by calls inside it).
    dp = ComposablePlan(applies=tuple(calls))
    calls = [c for c in calls if c.api != "replicate" or any(dp.manager(m) == c.path for m in model.param_modules())]
    all_paths = [p for p, _ in model.module_paths()]
    calls += [Compose(p, "checkpoint") for p in draw(st.lists(st.sampled_from(all_paths), unique=True, max_size=2))]
    order = keep_bottom_up(draw(st.permutations(_bottom_up(calls))))
    if draw(RARE) and draw(st.booleans()):  # 1 in 8
        i = draw(st.integers(0, len(order) - 1))
        c = order[i]
        again = draw(st.sampled_from(("replicate", "replicate_fsdp"))) if c.api == "fully_shard" and draw(
            st.booleans()) else c.api
        order.insert(i + 1, Compose(c.path, again))
    return ComposablePlan(applies=tuple(order))
