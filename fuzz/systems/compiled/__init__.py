"""Rank side of :mod:`parityfuzz.case.compiled`: compile the system under test's modules, and count what the
compiler captured (the proof that a compiled case compiled).

The backend handed to ``torch.compile`` is :class:`CountingBackend`, which counts the graphs and operations it
receives and hands each graph to the named backend.  Dynamo's caches are reset before a compiled system is
built (a persistent rank would otherwise reach the recompile limit across cases and fall back to eager without
a word), and Dynamo's graph-break counter and compile timers read after it trained.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn

from parityfuzz.case.compiled import Compile

#: The directory of the compiled-graph caches while a restart on a warm cache runs (:func:`graph_caches_in`).
GRAPH_CACHE: list[str] = []


@contextlib.contextmanager
def graph_caches_in(directory: str):
    """While the block runs, every :class:`Compiler` built turns Inductor's FX graph cache and AOTAutograd's cache on,
    in ``directory`` (one the run's ranks share, so each reads what every rank wrote, as ranks on one machine share
    the default cache directory): a job restarted on a warm cache.  Only those two caches move there (their
    ``_get_tmp_dir``, where each keeps its entries); the kernel cache stays the machine's.  Off again after."""
    from unittest import mock

    from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
    from torch._inductor.codecache import FxGraphCache

    with (mock.patch.object(FxGraphCache, "_get_tmp_dir", staticmethod(lambda: f"{directory}/fxgraph")),
          mock.patch.object(AOTAutogradCache, "_get_tmp_dir", classmethod(lambda cls: f"{directory}/aotautograd"))):
        GRAPH_CACHE.append(directory)
        try:
            yield
        finally:
            GRAPH_CACHE.pop()
            compiled_graph_caches(on=False)


def compiled_graph_caches(on: bool) -> None:
    """Turn on or off the caches that carry a compiled graph from one process to the next (Inductor's FX graph
    cache and AOTAutograd's; the remote ones always off).  Off unless a restart on a warm cache runs
    (:func:`graph_caches_in`): a verdict must not depend on earlier runs.  On a warm cache an entry one rank wrote
    was served to another whose tensor-parallel shard has another shape, and a case (fsdp2_tp, an uneven colwise MLP
    under inductor) failed on its second run only.  The caches of generated kernels, keyed by their source, stay on
    (a cold one costs inductor over a minute a case).  Set in the rank for good, like ``fallback_random`` below;
    only a compiled case pays for importing the configs (1.6 s)."""
    import torch._functorch.config
    import torch._inductor.config

    torch._inductor.config.fx_graph_cache = on
    torch._inductor.config.fx_graph_remote_cache = False
    torch._functorch.config.enable_autograd_cache = on
    torch._functorch.config.enable_remote_autograd_cache = False


class CountingBackend:
    """A ``torch.compile`` backend: counts graphs and their call nodes, then compiles with ``backend``."""

    def __init__(self, backend: str):
        self.backend = backend
        self.graphs = 0
        self.ops = 0

    def __repr__(self) -> str:  # what dynamo's errors name the backend by: the same in the harness and a script
        return f"CountingBackend({self.backend!r})"

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        from torch._dynamo import lookup_backend

        self.graphs += 1
        self.ops += sum(1 for node in gm.graph.nodes if node.op in ("call_function", "call_method", "call_module"))
        return lookup_backend(self.backend)(gm, example_inputs)


class Compiler:
    """What one system under test compiles, and what the compiler made of it; ``resolve(model, path)`` finds the
    module at a case path (through wrappers)."""

    #: Dynamo's timers (``torch._dynamo.utils.compilation_time_metrics``) that cover compiling, not nesting each
    #: other: a frame's compile (tracing and the backend) and a lazily compiled backward.
    TIMERS = ("_compile.compile_inner", "backward._backward_impl")

    def __init__(self, spec: Compile, resolve):
        self.spec, self.resolve = spec, resolve
        self.backend = CountingBackend(spec.backend)
        self._taken: dict = {}
        from torch._dynamo.utils import counters

        torch._dynamo.reset()
        counters.clear()
        compiled_graph_caches(on=bool(GRAPH_CACHE))
        if spec.backend == "inductor":
            # Inductor draws random numbers its own way; "fallback_random: fallback to eager for random/dropout"
            # (torch/_inductor/config.py) keeps dropout masks the eager reference's.  It stays set in the rank:
            # every inductor case wants it, and no eager run reads it.
            import torch._inductor.config as inductor_config

            inductor_config.fallback_random = True

    def before(self, model: nn.Module) -> nn.Module:
        """Before the parallel API: the ``blocks_before`` form compiles its modules."""
        if self.spec.form == "blocks_before":
            self._blocks(model)
        return model

    def after(self, model: nn.Module, inner: nn.Module) -> nn.Module:
        """After it (``model`` is what the API returned, ``inner`` the module holding the case's names): the
        ``blocks_after`` form compiles its modules, ``model`` compiles the whole; returns the module to call."""
        if self.spec.form == "blocks_after":
            self._blocks(inner)
        return self.whole(model)

    def whole(self, model: nn.Module) -> nn.Module:
        """The ``model`` form's ``torch.compile`` around ``model`` (also around a model the system wraps anew,
        DDP after a change of ``requires_grad``); any other form's ``model`` as it is (its blocks stay compiled)."""
        return torch.compile(model, backend=self.backend) if self.spec.form == "model" else model

    def _blocks(self, model: nn.Module) -> None:
        for path in self.spec.paths:
            self.resolve(model, path).compile(backend=self.backend)

    def take_stats(self) -> dict:
        """``{"graphs", "ops", "breaks", "cache_hits", "seconds"}`` on this rank since the last call: graphs and call
        nodes the backend received (a recompile is one more graph), graph breaks Dynamo counted, compiled graphs
        served from the FX graph and AOTAutograd caches (a restart's, :func:`graph_caches_in`), seconds spent compiling
        (Dynamo's own timers, reset with its caches: its frame compiles, the backend's included, and the backward
        graphs compiled lazily at the first backward)."""
        from torch._dynamo.utils import compilation_time_metrics, counters

        now = {"graphs": self.backend.graphs, "ops": self.backend.ops,
               "breaks": sum(counters["graph_break"].values()),
               "cache_hits": counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"],
               "seconds": sum(sum(compilation_time_metrics.get(key, ())) for key in self.TIMERS)}
        taken, self._taken = self._taken, now
        return {key: n - taken.get(key, 0) for key, n in now.items()}


