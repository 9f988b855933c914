"""``torch.compile`` of the system under test (:mod:`parityfuzz.case.compiled`), in the forms its family supports.

About one case in six compiles (compiling costs seconds where an eager case costs a fraction of one); of those,
one in twelve with ``inductor`` (generated C++: 3 to 10 s a case with a warm cache, over a minute cold for a
tensor-parallel model), the rest with ``aot_eager`` (0.1 to 4 s); in a swarm configuration that switched
``compile`` on, one in four with ``inductor``, the backend production runs (:data:`BACKENDS_ON`); a case
computing in float16 or bfloat16 always with ``aot_eager`` (inductor rounds otherwise than the eager reference
there).  A ``blocks_*`` form compiles one to three of the modules ``module.compile()`` traces (where the family
needs one in each of some groups, one of each first: a pipeline rank's stages); a model without any takes the
``model`` form where the family offers it, else stays eager.

An inductor case is restarted on its warm graph caches (``restart``) one time in two.

Shrinking: toward no compile, then ``aot_eager``, the family's first form, fewer modules, earlier ones, no restart.
"""

from __future__ import annotations

from hypothesis import strategies as st

from parityfuzz.case import Case
from parityfuzz.case.compiled import Compile, compilable, low_precision

#: The coin that compiles a case: 1 in 6, shrinking to eager.
COMPILES = st.sampled_from((False,) * 5 + (True,))
BACKENDS = st.sampled_from(("aot_eager",) * 11 + ("inductor",))
#: The backend where a swarm configuration switched ``compile`` on: inductor one time in four, so that the bugs
#: only its code generation and its graph caches show (a restart on them, ``compile.restart``) are drawn (the
#: 30-minute run of 2026-11-28 drew 3 restarts in 1,834 cases under :data:`BACKENDS`).
BACKENDS_ON = st.sampled_from(("aot_eager",) * 3 + ("inductor",))


#: The coin under a swarm configuration that switched ``compile`` on (:mod:`parityfuzz.strategies.swarm`).
COMPILES_ON = st.sampled_from((False, True, True, True))


@st.composite
def compiles(draw, case: Case, forms: tuple[str, ...], groups=None, switched: bool | None = None) -> Compile:
    """How ``case`` (drawn eager) compiles its system under test, or not, given its family's ``forms`` and, where
    a ``blocks_*`` form must compile a module of each of some lists (:attr:`parityfuzz.families.Family.compile_groups`:
    a pipeline rank's stages), ``groups(case)``: one module of each first (eager where a list is empty).
    ``switched``: whether a swarm configuration switched ``compile`` on (then compiled with a high probability) or
    off (eager); None: :data:`COMPILES`' coin."""
    on = draw(COMPILES if switched is None else COMPILES_ON) and switched is not False
    backend = draw(BACKENDS if switched is None else BACKENDS_ON)
    if not on or not forms:
        return Compile()
    if low_precision(case):  # inductor does not round as eager does there (validate_compile)
        backend = "aot_eager"
    restart = backend == "inductor" and draw(st.booleans())
    form = draw(st.sampled_from(forms))
    if form == "model":
        return Compile(backend, form, restart=restart)
    if not compilable(case):
        return Compile(backend, "model", restart=restart) if "model" in forms else Compile()
    return draw(blocks(case, form, groups, backend, restart))


@st.composite
def blocks(draw, case: Case, form: str, groups=None, backend: str = "aot_eager", restart: bool = False) -> Compile:
    """``case``'s modules compiled one by one in the ``blocks_*`` ``form``: one of each of ``groups(case)`` first,
    then up to three in all; eager where there is none to compile (or a group is empty)."""
    candidates = compilable(case)
    needed = groups(case) if groups is not None else []
    if not candidates or any(not g for g in needed):
        return Compile()
    paths = list(dict.fromkeys(draw(st.sampled_from(g)) for g in needed))
    paths += draw(st.lists(st.sampled_from(candidates), min_size=0 if paths else 1, max_size=max(0, 3 - len(paths)),
                           unique=True).map(lambda more: [p for p in more if p not in paths]))
    return Compile(backend, form, tuple(paths), restart)
