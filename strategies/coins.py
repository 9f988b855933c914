"""Coins shared by the strategies."""

from hypothesis import strategies as st

#: A rare coin (1 in 4): its first choice is False, so it shrinks to "off".
RARE = st.sampled_from((False, False, False, True))
#: A frequent coin (2 in 3) that still shrinks to "off": for the forms production uses.
OFTEN = st.sampled_from((False, True, True))
