"""Swarm configurations: which training-loop dimensions (:mod:`parityfuzz.case.dimensions`) a case may draw.

Swarm testing (Groce et al., ISSTA 2012): a test that leaves features out at random finds more bugs than one that
always allows all of them, because features crowd each other out and a fault often needs a few of them at once.
Each case first draws its configuration: every dimension its family supports switched on (two in five; ``compile``,
whose cases cost seconds, one in three; ``reentrant``, which only some checkpoints can take, three in five; loss
scaling, which brings float16 autocast with it, one in four) or off; a dimension switched on is then drawn with a high probability by the
strategy that owns it (:mod:`parityfuzz.strategies.training`, :func:`parityfuzz.strategies.cases.finish`), and one
switched off never.  Each dimension then comes up in about a third of its family's cases, any two together in about
a tenth, where independent coins of a few percent gave their conjunction well under one case in a hundred.

The configuration is drawn inside the case (its first choices), not once per Hypothesis round: every case stays
whole in its own choice sequence, so Hypothesis's database replays it, and its shrinker turns switches off,
exactly; a schedule slice sees the configuration through the ``dim:<name>`` feature tags its outlook already counts.

Shrinking: every switch toward off (the case of the family's plan alone).
"""

from __future__ import annotations

from hypothesis import strategies as st

#: A dimension's switch: on in 2 cases of 5, shrinking to off.
SWITCH = st.sampled_from((False, False, False, True, True))
#: ``compile``'s: on in 1 case of 3 (a compiled case costs seconds where an eager one costs a fraction of one).
COSTLY = st.sampled_from((False, False, True))
#: ``reentrant``'s: on in 3 cases of 5 (only a plan's checkpoints whose input requires grad can take it).
NARROW = st.sampled_from((False, False, True, True, True))
#: ``loss_scale``'s: on in 1 case of 4 (it brings float16 autocast with it, which would otherwise crowd out the rest
#: of the low-precision draws; ``overflow``, switched on in 2 of 5, brings loss scaling with it too).
SCALING = st.sampled_from((False, False, False, True))
SWITCHES = {"compile": COSTLY, "reentrant": NARROW, "loss_scale": SCALING}


@st.composite
def swarms(draw, dimensions: tuple[str, ...], required: frozenset[str] = frozenset()) -> frozenset[str]:
    """The dimensions among ``dimensions`` (those a family supports) switched on for one case; those in ``required``
    always (their switches drawn all the same: the choice sequence stays put when a caller's requirement shrinks
    away)."""
    return frozenset(d for d in dimensions if draw(SWITCHES.get(d, SWITCH)) or d in required)


#: A flag dimension switched on: set in 3 cases of 4 (shrinking to unset).
HIGH = st.sampled_from((False, True, True, True))


def flag(draw, swarm: frozenset[str] | None, name: str, legacy: st.SearchStrategy[bool]) -> bool:
    """A flag dimension's value: ``legacy``'s coin without a configuration (``swarm`` None), else :data:`HIGH`'s
    where ``name`` is switched on, and unset where not (the coin drawn all the same: the choice sequence stays put
    while the switches shrink)."""
    if swarm is None:
        return draw(legacy)
    return draw(HIGH) and name in swarm
