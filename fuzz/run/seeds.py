"""The seeds of a case's random draws: plain arithmetic on the case's seed, a rank's data-parallel index, the
step and the microbatch.  The harness's ranks (:mod:`parityfuzz.run.build`, :mod:`parityfuzz.run.train`) and the
exported script (:mod:`parityfuzz.export.script`, which embeds this module's source) draw from the same keys, so
the two cannot drift apart.  No imports: the script copies the source as it is."""


def data_key(seed: int, data: int, step: int, micro: int, salt: int) -> int:
    """The key of one drawn input (``salt`` 0) or target (1): ``data`` is 0 where every rank gets the same data,
    else the rank's data-parallel index + 1."""
    return (seed * 1_000_003 + data * 7919 + step * 97 + micro + salt * 2**40) % 2**63


def forward_seed_key(seed: int, dp: int, step: int, micro: int) -> int:
    """The global RNG seed of one forward (dropout masks): differs per data-parallel index, step and microbatch,
    alike in every system and across the ranks of a tensor-parallel group."""
    return (seed * 1_000_003 + dp * 7919 + step * 97 + micro * 13 + 1) % 2**63


def perturbation_key(seed: int, sample: int) -> int:
    """The seed of noise sample ``sample``'s perturbation of the reference's initial weights."""
    return seed + 7919 * sample


def gradient_perturbation_key(seed: int, sample: int, passes: int) -> int:
    """The seed of noise sample ``sample``'s perturbation of the gradients of the pass that makes ``passes``
    recorded passes."""
    return seed * 1009 + passes + 7919 * sample
