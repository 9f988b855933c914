"""Whole parity cases of any family: the entry point that checks its arguments and hands over to the
family's strategy (one module per family under ``strategies/``)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from parityfuzz import families
from parityfuzz.case import Case, CaseError
from parityfuzz.case import dimensions, dtypes
from parityfuzz.case.mesh import DEFAULT_WORLD_SIZES
from parityfuzz.case.training import input_requires_grad
from parityfuzz.strategies.compiled import compiles
from parityfuzz.strategies.perturbation import delays
from parityfuzz.parts.activation_checkpoint.strategy import reentrant
from parityfuzz.strategies.swarm import swarms

def cases(*, family: str = "fsdp2", world_sizes: tuple[int, ...] = DEFAULT_WORLD_SIZES, system: str = "",
          reference: str = "", max_depth: int = 2, max_steps: int = 10,
          perturb: bool = True, within: tuple[str, ...] | None = None,
          require: tuple[str, ...] = ()) -> st.SearchStrategy[Case]:
    """Valid parity cases of ``family`` on ``world_sizes`` ranks.

    ``system`` and ``reference`` override the family's (a plug-in or test-only faulty system as
    ``module:attribute``); ``""`` keeps the family's own (its reference rule picks the emulating ``ddp_mp``
    under mixed precision).  ``max_depth`` bounds the nesting of the model tree, ``max_steps`` the training
    steps; ``perturb`` draws delays on random ranks of the system under test; ``within``: the training-loop dimensions
    the cases may draw, of those the family supports (None: all of them; a checkpoint that resumes the case into
    another family draws only what both take); ``require``: dimensions switched on in every case's configuration (a
    target mixing families favours one only a few of them take: :mod:`parityfuzz.strategies.checkpoint`).

    Each case first draws which of its family's training-loop dimensions it may draw (its swarm configuration,
    :mod:`parityfuzz.strategies.swarm`); how the rest shrinks is the family strategy's to say (see its module).
    """
    if family not in families.MODULES:
        raise InvalidArgument(f"family={family!r} is not a registered family (known: "
                              f"{', '.join(sorted(families.MODULES))})")
    if not world_sizes or any(not isinstance(w, int) or isinstance(w, bool) or w < 1 for w in world_sizes):
        raise InvalidArgument(f"world_sizes={world_sizes!r} must be a non-empty tuple of positive ints")
    for name, value in (("system", system), ("reference", reference)):
        if not isinstance(value, str):
            raise InvalidArgument(f"{name}={value!r} must be a system name ('' for the family's)")
    if not isinstance(max_depth, int) or max_depth < 0:
        raise InvalidArgument(f"max_depth={max_depth!r} must be an int >= 0")
    if not isinstance(max_steps, int) or not 1 <= max_steps <= 50:
        raise InvalidArgument(f"max_steps={max_steps!r} must be an int in [1, 50]")
    record = families.get(family)
    strategy = importlib.import_module(record.strategy).cases
    args = (tuple(world_sizes), system, reference, max_depth, max_steps, perturb)
    if "swarm" not in inspect.signature(strategy).parameters:  # a family strategy written before swarms
        return strategy(*args)
    supported = dimensions.supported(record)
    supported = supported if within is None else tuple(d for d in supported if d in within)
    if set(require) - set(supported):
        raise InvalidArgument(f"require={require!r}: {family} cases do not draw {sorted(set(require) - set(supported))}"
                              f" (they draw: {', '.join(supported)})")
    return _swarmed(strategy, args, supported, frozenset(require))


@st.composite
def _swarmed(draw, strategy, args: tuple, supported: tuple[str, ...], required: frozenset[str]) -> Case:
    """A case of ``strategy`` under a swarm configuration over the family's ``supported`` dimensions (``required``
    on), drawn first (:mod:`parityfuzz.strategies.swarm`)."""
    return draw(strategy(*args, swarm=draw(swarms(supported, required))))


def finish(draw, *, world_size: int, model, mesh, plan, train, system: str, reference: str, perturb: bool,
           swarm: frozenset[str] | None = None) -> Case:
    """The case a family strategy drew the parts of: its seed, delays, reentrant checkpoints
    (:mod:`parityfuzz.parts.activation_checkpoint.strategy`) and ``torch.compile`` of the system under test
    (:mod:`parityfuzz.strategies.compiled`) drawn last (they shrink first to 0, none, non-reentrant and eager),
    validated.  ``swarm``: the dimensions its configuration switched on (None: each by its own coin)."""
    switched = (lambda name: None) if swarm is None else swarm.__contains__
    case = Case(seed=draw(st.integers(0, 2**16)), world_size=world_size, model=model, mesh=mesh, plan=plan,
                train=train, delays=draw(delays(world_size)) if perturb else (), system=system, reference=reference)
    case = dataclasses.replace(case, plan=draw(reentrant(case, switched("reentrant"))))
    if swarm is not None and train.loss_scale and families.get(plan.family).amp_scaler and draw(st.booleans()):
        # the scaler a user of the family may pick: torch.amp.GradScaler over DTensor gradients (shrinks to its own)
        case = dataclasses.replace(case, train=dataclasses.replace(case.train, scaler="amp"))
    try:  # autocast to one low dtype does not go with parameters in the other (dtypes.check_autocast): none then
        dtypes.check_autocast(case)
    except CaseError:
        case = dataclasses.replace(case, train=dataclasses.replace(case.train.unscaled(), autocast=""))
    t = case.train
    if t.overflow_in and input_requires_grad(case.model, t, t.overflow_in):  # (the family's strategy froze less
        case = dataclasses.replace(case, train=dataclasses.replace(t, overflow_in=""))  # after training(): the loss's)
    family = families.get(plan.family)
    compiled = dataclasses.replace(case, compile=draw(compiles(case, family.compiles, family.compile_groups,
                                                               switched("compile"))))
    if not compiled.compile:
        return case.validate()
    try:  # compiled where the family's rules take it (FSDP1: use_orig_params=True), else eager
        return compiled.validate()
    except CaseError as e:
        if not e.field.startswith("compile"):
            raise
        return case.validate()
