"""The tolerance rule, in one place: how far a value may be from the reference's.  The oracle
(:mod:`parityfuzz.judge.oracle`) judges by it, and the exported script (:mod:`parityfuzz.export.script`) embeds
this module's source, so the two cannot drift apart.  Plain arithmetic on floats and dicts, no imports: the
script copies it as it is (each side measures differences with its own arrays: numpy here, torch there).

A value passes when it is within ``K * noise + FLOOR_ULPS * eps * scale`` of the reference's (see the oracle's
docstring for why): ``noise`` is the largest difference a perturbed reference run showed, pooled over the passes
of one comparison as the worst noise relative to the scale so far; ``scale`` the magnitude of the tensor's scale
group (the largest of the pass where the group's reference tensors are all zero).
"""

#: Multiple of the measured noise a difference may reach (docs/oracle.md gives the measurements).
K = 16.0
#: Ulps of the model's dtype, at the tensor's scale, a difference may reach whatever the noise.
FLOOR_ULPS = 32.0
#: Ulps of the lowest dtype, below the model's, in which the system under test may round otherwise than the
#: reference (parityfuzz.case.dtypes.unpinned_dtype: compiled code, an order of summation torch does not pin), at
#: the tensor's scale, added to the floor; the perturbed runs cannot measure it, as a perturbation of the weights'
#: last bits vanishes in the cast to that dtype.  The largest seen: 0.37 ulps (compiled), one rounding (order).
UNPINNED_ULPS = 4.0
#: Perturbed runs a value mismatch must stand against before it is reported: one perturbed run is one sample
#: of the noise, an unlucky one can measure a thirtieth of what the others do, and at a step where training
#: is chaotic the noise is heavy-tailed: most samples measure rounding, a few an O(1) change (a ZeRO case
#: whose step-6 gradient 9 of 40 perturbed runs changed by 7% to 100%, the 31 others by 1e-13).  A flip that
#: one perturbation in five shows escapes all 16 with probability 3%, one in three with 0.2%.
NOISE_SAMPLES = 16


def allowed(scale: float, noise: float, eps: float, k: float = K, floor_ulps: float = FLOOR_ULPS,
            unpinned_eps: float = 0.0) -> float:
    """The largest difference allowed at ``scale`` with ``noise`` measured, in a dtype of machine epsilon
    ``eps``; ``unpinned_eps``: that of the dtype the reference does not pin the rounding of (0: none)."""
    return k * noise + (floor_ulps * eps + UNPINNED_ULPS * unpinned_eps) * scale


def pooled_noise(measured: float, scale: float, pooled: dict, key) -> float:
    """The noise to allow for the tensor ``key``: ``measured`` now, or more where an earlier pass of the same
    comparison measured a larger noise relative to the scale (``pooled`` keeps that ratio per tensor)."""
    if scale > 0 and measured == measured and measured != float("inf"):
        pooled[key] = max(pooled.get(key, 0.0), measured / scale)
        return pooled[key] * scale
    return measured


def scale_of(scales: dict, group: str) -> float:
    """The scale of a tensor of scale group ``group``: the group's, or where the group's reference tensors are
    all zero (an analytically zero gradient) the largest scale of the pass."""
    return scales.get(group, 0.0) or max(scales.values(), default=0.0)
