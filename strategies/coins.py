"""Coins shared by the strategies."""

from hypothesis import strategies as st

#: A rare coin (1 in 4): its first choice is False, so it shrinks to "off".
RARE = st.sampled_from((False, False, False, True))
