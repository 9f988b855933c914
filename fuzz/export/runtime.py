"""The body every exported script shares, as text: its data, its training loop (every role, on every rank), the
comparison on rank 0 and the main function.  Torch-only code; where it needs what the harness computes, the
harness's own source is embedded rather than copied by hand: the seeds (:mod:`parityfuzz.run.seeds`), the
perturbations that measure the rounding noise (:mod:`parityfuzz.run.train`), the dtype names
(:mod:`parityfuzz.run.record`), the tolerance rule
(:mod:`parityfuzz.judge.tolerance`), the oracle (:mod:`parityfuzz.judge.oracle`, over torch tensors:
:mod:`parityfuzz.export.arrays`) and the helpers for paths through wrappers (:mod:`parityfuzz.systems.base`).
"""

from __future__ import annotations

import inspect
import pprint


def data() -> str:
    return DATA.replace("$WRAPPER_HELPERS", _wrapper_helpers()).replace("$SEEDS", _seeds()).replace("$PADDED", _padded())


def _padded() -> str:
    """The harness's padding of token targets (:func:`parityfuzz.run.build.padded`), as it is."""
    from parityfuzz.run import build

    return f"IGNORE_INDEX = {build.IGNORE_INDEX}\n\n\n" + inspect.getsource(build.padded)


def train() -> str:
    return TRAIN.replace("$PERTURBATION", _perturbation()).replace("$COMPILER", _compiler()).replace(
        "$SCALING", _scaling())


def _scaling() -> str:
    """The harness's loss scaling (:mod:`parityfuzz.run.scaling`) and its overflow spike, as they are."""
    from parityfuzz.case import training
    from parityfuzz.run import scaling

    return f"OVERFLOW_SPIKE = {training.OVERFLOW_SPIKE!r}\n\n\n" + "\n\n".join(
        inspect.getsource(f) for f in (training.overflow_spike, scaling.make_scaler, scaling.backward_loss,
                                       scaling.step_skipped, scaling.any_rank, scaling.spike_output))


def _compiler() -> str:
    """The harness's compile of the system under test and its proof (:mod:`parityfuzz.systems.compiled`), as it
    is, with the spec's dataclass (:mod:`parityfuzz.case.compiled`)."""
    from parityfuzz.case import compiled as spec
    from parityfuzz.systems import compiled

    return "GRAPH_CACHE = []\n\n\n" + "\n\n".join(inspect.getsource(c) for c in (
        spec.Compile, compiled.graph_caches_in, compiled.compiled_graph_caches,
        compiled.CountingBackend, compiled.Compiler))


def compare() -> str:
    return COMPARE.replace("$ORACLE", _tolerance() + "\n\n" + _oracle())


def _perturbation() -> str:
    """The harness's perturbations of weights and gradients (what measures the rounding noise) and its recording
    helpers (a dtype's name, where a DTensor's piece sits), copied."""
    from parityfuzz.run import record, train

    return "\n\n".join(inspect.getsource(f) for f in (train.perturb, train.perturb_gradients, record.dtype_name,
                                                     record.shard_info))


def _tolerance() -> str:
    """The harness's tolerance rule, as it is (:mod:`parityfuzz.judge.tolerance`)."""
    from parityfuzz.judge import tolerance

    return inspect.getsource(tolerance).split('"""', 2)[2].strip() + "\n"


def _oracle() -> str:
    """The harness's oracle as it is (:mod:`parityfuzz.judge.oracle`), with what it reads of the trace, the verdict
    and the promise, over torch tensors (:mod:`parityfuzz.export.arrays`: the harness's numpy functions, by the
    same names)."""
    from parityfuzz.case import dtypes
    from parityfuzz.export import arrays
    from parityfuzz.judge import oracle, verdict
    from parityfuzz.run import trace

    constants = {"EPS": dtypes.EPS, "PASS": verdict.PASS, "MISMATCH": verdict.MISMATCH, "CHECKS": verdict.CHECKS,
                 "ABSENT": trace.ABSENT, "ELSEWHERE": trace.ELSEWHERE, "TENSOR_KINDS": trace.TENSOR_KINDS,
                 "LOOSE_SHARE": oracle.LOOSE_SHARE}
    aliases = {"Array": "torch.Tensor", "Pass": "tuple", "Tensors": "dict"}  # the trace's names for plain types
    functions = [f for f in vars(arrays).values() if inspect.isfunction(f) and f.__module__ == arrays.__name__]
    pieces = (*functions, verdict.pass_name, verdict.Divergence, dtypes.Promise,
              trace.ShardInfo, trace.Rec, trace.assemble, trace.module_of, trace.replica_groups, trace.RankTrace,
              trace.Trace, oracle.Tolerance, oracle._Mismatch, oracle._Pass, oracle.module_scales, oracle.compare,
              oracle._compare_pass, oracle._compare_tensor, oracle._first_noise_sensitive_skip,
              oracle._first_non_finite)
    return "\n".join([*(f"{name} = {pprint.pformat(value, width=116)}" for name, value in constants.items()),
                      *(f"{name} = {value}" for name, value in aliases.items())]) + "\n\n\n" + "\n\n".join(
        inspect.getsource(p) for p in pieces)


def _seeds() -> str:
    """The harness's seed arithmetic, as it is (:mod:`parityfuzz.run.seeds`)."""
    from parityfuzz.run import seeds

    return inspect.getsource(seeds).split('"""', 2)[2].strip() + "\n"


def _wrapper_helpers() -> str:
    """The harness's own helpers for case paths through wrappers (checkpoint wrappers, FSDP1 instances)."""
    from parityfuzz.systems import base

    return "\n\n".join([f"WRAPPER_ATTRS = {base.WRAPPER_ATTRS!r}"] + [
        inspect.getsource(f) for f in (base.case_name, base.resolve, base.holder, base._wrapped, base.unwrap)])


DATA = '''
# ---- data: the fuzzer's inputs, keyed by the case's seed, the rank's data-parallel index, step and microbatch


$SEEDS

def generator(dp, step, micro, salt):
    return torch.Generator().manual_seed(data_key(SEED, 0 if SAME_INPUT else dp + 1, step, micro, salt))


def batch(dp, step, micro, nonroot=False):
    """The input of the root (or, ``nonroot``, of the module at NONROOT) for one forward."""
    g = generator(dp, step, micro, 0)
    width, dtype = (NONROOT_IN_WIDTH, NONROOT_INPUT_DTYPE) if nonroot else (None if EMBEDDING else IN_WIDTH, INPUT_DTYPE)
    if width is None:
        return torch.randint(0, VOCAB, (BATCH, SEQ_LEN), generator=g)
    return torch.randn((BATCH, SEQ_LEN, width), generator=g, dtype=torch.float64).to(dtype)


$PADDED

def target(dp, step, micro, nonroot=False):
    g = generator(dp, step, micro, 1)
    if EMBEDDING and not nonroot:
        y = torch.randint(0, VOCAB, (BATCH, SEQ_LEN), generator=g)
        return padded(y, PAD, PAD_ALL_DP0 and micro == 0 and dp == 0, g)
    return torch.randn((BATCH, SEQ_LEN, NONROOT_OUT_WIDTH if nonroot else OUT_WIDTH), generator=g,
                       dtype=torch.float64)


def forward_seed(dp, step, micro):
    """The global RNG seed of one forward (dropout masks): alike in every system."""
    return forward_seed_key(SEED, dp, step, micro)


def autocast(x):
    """The case's autocast region around a forward and its loss (AUTOCAST: its dtype), the backward outside it."""
    return torch.autocast(x.device.type, dtype=getattr(torch, AUTOCAST)) if AUTOCAST else contextlib.nullcontext()


def loss_fn(out, tgt):
    if not tgt.is_floating_point():
        return F.cross_entropy(out.flatten(0, -2), tgt.flatten(), reduction=LOSS, label_smoothing=LABEL_SMOOTHING)
    return F.mse_loss(out, tgt.to(out.dtype), reduction=LOSS)


def under(module, paths):
    return any(module == p or module.startswith(p + ".") or p == "" for p in paths)


def frozen_at(name, step):
    """Whether the parameter ``name`` has requires_grad=False during ``step``."""
    return any(under(name.rpartition(".")[0], (path,)) and (until == 0 or step < until) for path, until in FROZEN)


$WRAPPER_HELPERS

def param_groups(named):
    """The case's parameter groups over ``(name, parameter)`` pairs (a group takes its modules' parameters; the
    rest form the default group)."""
    default, grouped = [], [[] for _ in GROUPS]
    for name, p in named:
        i = next((i for i, (paths, _, _) in enumerate(GROUPS) if under(name.rpartition(".")[0], paths)), None)
        (default if i is None else grouped[i]).append(p)
    groups = [{"params": default}] if default else []
    return groups + [{"params": ps, "lr": LR * scale, "weight_decay": wd} for (_, scale, wd), ps in zip(GROUPS, grouped)]


def make_optimizer(named=None, groups=None, cls=None):
    """The case's optimizer and LR scheduler (None) over ``named`` pairs, or over ready parameter ``groups``;
    ``cls`` builds the optimizer instead of the case's class (a wrapper such as ZeroRedundancyOptimizer)."""
    optim = (cls or OPTIMIZER)(param_groups(named) if groups is None else groups, lr=LR, weight_decay=WEIGHT_DECAY,
                               foreach=FOREACH, maximize=MAXIMIZE, **OPTIMIZER_EXTRA)
    if SCHEDULER == "step":
        return optim, torch.optim.lr_scheduler.StepLR(optim, step_size=2, gamma=0.5)
    if SCHEDULER == "linear":
        return optim, torch.optim.lr_scheduler.LinearLR(optim, start_factor=1.0, end_factor=0.1, total_iters=STEPS)
    return optim, None
'''

TRAIN = '''
# ---- training, as the fuzzer's loop does it


$PERTURBATION

def reshard(model):
    """Every FSDP2 module resharded, before the registered parameters change (fully_shard: "the registered parameters
    must be the sharded parameters"); FSDPModule.reshard is not recursive (parityfuzz.systems.base.System.reshard)."""
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.reshard()


def whole(t):
    """``(dtype, float64 on the CPU[, where the piece sits])``, as the harness records a tensor
    (parityfuzz.run.record.record_tensors): a plain tensor whole; a Shard/Replicate DTensor's local piece with its
    ShardInfo, which the oracle puts together and checks against its placements (no collective: a piece of the
    wrong shape cannot hang the gather); a DTensor of any other placement gathered (every rank takes part)."""
    if t is None:
        return None
    dtype, info = dtype_name(t), None
    if isinstance(t, DTensor):
        info = shard_info(t)
        t = t.to_local() if info is not None else t.full_tensor()
    value = t.detach().to("cpu", torch.float64, copy=True)
    return (dtype, value) if info is None else (dtype, value, info)


def sleep(where):
    """The case's delay at this point on this rank (the system under test only)."""
    seconds = DELAYS.get(dist.get_rank(), {}).get(where)
    if seconds:
        time.sleep(seconds)


def delay_collectives():
    """Sleep before each of FSDP2's all-gathers and reduce-scatters where the case delays them on this rank."""
    for where, name in (("all_gather", "all_gather_single"), ("reduce_scatter", "reduce_scatter_single")):
        original = getattr(dist, name)
        if DELAYS.get(dist.get_rank(), {}).get(where) and not hasattr(original, "delayed"):

            def delayed(*args, original=original, where=where, **kwargs):
                sleep(where)
                return original(*args, **kwargs)

            delayed.delayed = True
            setattr(dist, name, delayed)


def build(role, dp, device, mesh, step=0):
    """``(module to call, module with the case's names, optimizer, scheduler)`` of one system on this rank, as it
    stands at ``step`` (a system resumed there is frozen as the saved one was, after the step before)."""
    torch.manual_seed(SEED)
    torch.set_default_dtype(torch.float32)
    model = build_model(dp)
    for name, p in model.named_parameters():
        p.requires_grad_(not frozen_at(name, max(step - 1, 0)))
    model = model.to(device)
    if role == "system":
        global COMPILER
        if TO_FLOAT64 and not CONVERTS_AFTER_WRAP:
            model = model.to(torch.float64)
        COMPILER = Compiler(COMPILE, resolve) if COMPILE else None
        if COMPILER is not None:
            model = COMPILER.before(model)
        model = apply_plan(model, mesh, device)
        if TO_FLOAT64 and CONVERTS_AFTER_WRAP:
            model.to(torch.float64)
        inner = model.module if isinstance(model, DDP) else model
        if COMPILER is not None:
            model = COMPILER.after(model, inner)
    else:
        if TO_FLOAT64:
            model = model.to(torch.float64)
        if role.startswith("perturbed"):
            perturb(model, perturbation_key(SEED, int(role.partition("/")[2])))
        inner, model = model, reference(model, device, mesh)
        model.perturbed = role.startswith("perturbed")  # (a reference may measure more of the noise: pipeline's)
    if role == "system":
        optim, scheduler = SYSTEM_OPTIMIZER([(case_name(n), p) for n, p in inner.named_parameters()])
        delay_collectives()
    else:
        optim, scheduler = make_optimizer(reference_parameters(model, inner))
    return model, inner, optim, scheduler


$COMPILER


$SCALING


COMPILE = Compile(*COMPILE_SPEC)
COMPILER = None  # the system under test's, where COMPILE compiles it


def compiled_nothing():
    """A compiled system under test must prove that it compiled: the message where it captured no graph."""
    if COMPILER is not None and not COMPILER.backend.graphs:
        return f"torch.compile ({COMPILE.form}, {COMPILE.backend}) captured no graph: the system ran eagerly"
    return None


def is_ddp(model):
    """Whether the system's model is DDP (inside torch.compile's OptimizedModule or not)."""
    return isinstance(getattr(model, "_orig_mod", model), DDP)


def ddp(module, device, **kwargs):
    gated = any(type(m).__name__ == "Gate" for m in module.modules())  # unused parameters on some forwards
    return DDP(module, device_ids=[device.index] if device.type == "cuda" else None, find_unused_parameters=gated,
               **kwargs)


def nonroot_backward(role, model, inner, x, y):
    """A pass through only the module at NONROOT."""
    if role != "system":
        return reference_nonroot(model, inner, x, y)
    if not is_ddp(model):
        with loss_context():
            with autocast(x):
                loss = loss_fn(resolve(model, NONROOT)(x), y)
            sleep("after_forward")
            loss.backward()
        after_backward(model, True)
        return loss.detach()
    return averaged_nonroot(inner, x, y)


def averaged_nonroot(inner, x, y):
    """A pass through only the module at NONROOT that bypasses DDP (the reference's, a system under DDP's): its
    gradients are averaged by hand, as PyTorch's own non-root test does (taken with autograd.grad: DDP would mark
    them used)."""
    module = resolve(inner, NONROOT)
    with autocast(x):
        loss = loss_fn(module(x), y)
    params = [p for p in module.parameters() if p.requires_grad]
    for p, grad in zip(params, torch.autograd.grad(loss, params, allow_unused=True)):
        if grad is not None:
            grad = grad.clone(memory_format=torch.contiguous_format)
            dist.all_reduce(grad)
            grad.div_(WORLD_SIZE)
            p.grad = grad if p.grad is None else p.grad.add_(grad)
    return loss.detach()


def train(role, dp, device, mesh):
    """One system's run on this rank: per pass of training its loss, its gradients (before the optimizer step)
    and its parameters and buffers (after), and the largest local gradient of each parameter (before any
    reduction); a pass is a step, a non-root pass after it (NONROOT), an evaluation forward (EVAL)."""
    model, inner, optim, scheduler = build(role, dp, device, mesh)
    scaler = make_scaler(LOSS_SCALE, device.type, SHARDED_SCALER if role == "system" else REFERENCE_SHARDED_SCALER)
    local, watched = {}, set()

    def named():  # asked afresh each time, as a user would: FSDP2 swaps the registered parameters
        if role != "system":
            return reference_parameters(model, inner)
        return [(case_name(n), p) for n, p in inner.named_parameters()]

    def watch():  # the reference's local gradients: the terms a reduction sums (its rounding is proportional)
        def hook(grad, name):
            value = grad.to_local() if isinstance(grad, DTensor) else grad
            if value.numel():
                local[name] = max(local.get(name, 0.0), float(value.detach().abs().max()))

        for name, p in named():
            if p.requires_grad and role != "system" and name not in watched:
                watched.add(name)
                p.register_hook(lambda grad, name=name: hook(grad, name))

    def zero_grad(step):
        with step_context() if role == "system" else reference_step_context():
            optim.zero_grad(set_to_none=ZERO_GRAD == "none" or (ZERO_GRAD == "alternate" and step % 2 == 0))

    def grads():
        return gradients(model, named()) if role == "system" else {name: whole(p.grad) for name, p in named()}

    def finish(at_, losses, step):
        # the local gradients the hooks saw were scaled: unscaled here (else they would loosen the floor by the
        # scale, as in parityfuzz.run.train's finish_pass), and recorded below unless the scaler skipped the step
        factor = scaler.get_scale() if scaler is not None else 1.0  # this step's scale (the step updates it)
        seen = {name: value / factor
                for name, value in {**local, **(reference_local(model) if role != "system" else {})}.items()}
        record = {"at": at_, "loss": ("|".join(dict.fromkeys(dtype_name(x) for x in losses)),
                                      torch.tensor(sum(float(x) for x in losses), dtype=torch.float64)),
                  "grad": grads() if scaler is None else {}}
        local.clear()
        if role.startswith("perturbed"):
            perturb_gradients(named(), gradient_perturbation_key(SEED, int(role.partition("/")[2]), len(passes) + 1),
                              unpinned_eps=EPS[UNPINNED_DTYPE] if UNPINNED_DTYPE else 0.0)
        if role == "system":
            sleep("before_step")
        skipped = False
        with step_context() if role == "system" else reference_step_context():
            if scaler is not None:  # the AMP recipe: unscale before clipping, step and update through the scaler
                scaler.unscale_(optim)
                skipped = step_skipped(scaler, optim)
            if CLIP:
                if role == "system":
                    clip(model, [p for _, p in named()], CLIP)
                else:
                    torch.nn.utils.clip_grad_norm_([p for _, p in named() if p.grad is not None], CLIP)
            if scaler is None:
                optim.step()
            else:
                scaler.step(optim)
                scaler.update()
        if scaler is not None and not any_rank(skipped, device):  # recorded as the optimizer used them; a step some
            # rank skipped is not (gathering the gradients takes every rank)
            record["grad"] = grads()
        record["skipped"] = skipped
        record["local"] = {} if skipped else seen
        if role != "system":
            reference_stepped(model)
        if scheduler is not None:
            scheduler.step()
        record["param"] = (parameters(model, named()) if role == "system" else
                           {name: whole(p) for name, p in named()})
        record["param"].update({"buffer:" + case_name(n): whole(b) for n, b in inner.named_buffers()})
        passes.append(record)

    def plain(loss):
        loss = loss.detach()
        return loss.full_tensor() if isinstance(loss, DTensor) else loss

    watch()
    passes = []
    for step in range(STEPS):
        # every rank on a step where a freeze ends (a pipeline rank may hold none of the parameters it names)
        if step and any(until == step for _, until in FROZEN):
            # unfrozen: DDP is built anew, as its documentation asks of a changed requires_grad
            thawed = [name for name, _ in named() if frozen_at(name, step - 1) and not frozen_at(name, step)]
            if role == "system":
                reshard(model)
            for name, p in named():  # (after reshard(): the parameters registered now)
                if name in thawed:
                    p.requires_grad_(True)
            if role != "system":
                model = reference_thawed(model, inner, device, mesh)
            elif is_ddp(model):  # a system under DDP (zero) likewise
                model = apply_plan(inner, mesh, device)
                if COMPILER is not None:  # compiled as the first DDP was
                    model = COMPILER.whole(model)
            elif hasattr(model, "rebuild"):  # a pipeline: its stages and schedule built anew (PipelineSystem.unfreeze)
                model.rebuild()
            watch()
        zero_grad(step)
        losses = []
        for micro in range(MICROBATCHES):
            last = micro == MICROBATCHES - 1
            if "CLOCK" in globals():
                CLOCK.set(step, micro, MICROBATCHES)
            torch.manual_seed(forward_seed(dp, step, micro))
            x, y = batch(dp, step, micro).to(device), target(dp, step, micro).to(device)
            spike = overflow_spike(OVERFLOW_AT, step, dp, micro)
            # (the overflow in one module's output gradient, or in the loss)
            hook = spike_output(resolve(inner, OVERFLOW_IN), spike) if OVERFLOW_IN and spike != 1 else None
            spike = 1.0 if hook is not None else spike
            if role == "system":
                loss = system_pass(model, x, y, scaler, spike, micro, last)
            else:
                loss = reference_pass(model, x, y, scaler, spike, last)
            if hook is not None:
                hook.remove()
            losses.append(plain(loss))
        finish((step, ""), losses, step)
        if NONROOT:
            zero_grad(step)
            torch.manual_seed(forward_seed(dp, step, MICROBATCHES))
            x = batch(dp, step, MICROBATCHES, nonroot=True).to(device)
            y = target(dp, step, MICROBATCHES, nonroot=True).to(device)
            finish((step, f"non-root {NONROOT}"), [plain(nonroot_backward(role, model, inner, x, y))], step)
        if EVAL:  # an evaluation forward between steps: its loss is compared, nothing is stepped
            if "CLOCK" in globals():
                CLOCK.set(step, 0, MICROBATCHES)
            x, y = batch(dp, step, MICROBATCHES + 1).to(device), target(dp, step, MICROBATCHES + 1).to(device)
            model.eval()
            with torch.no_grad(), (loss_context() if role == "system" else reference_loss_context()), autocast(x):
                loss = system_evaluate(model, x, y) if role == "system" else reference_evaluate(model, x, y)
            model.train()
            passes.append({"at": (step, "eval"), "loss": (dtype_name(loss),
                                                                    plain(loss).to("cpu", torch.float64)),
                           "grad": {}, "param": {}, "local": {}})
        if step + 1 in (CHECKPOINT_STEP, ROLLBACK_AT):  # the checkpoint event: save, load, training goes on
            model, inner, optim, scheduler = checkpoint_turn(step + 1, role, dp, device, mesh, model, inner, optim,
                                                             scheduler, passes, named)
    if role == "system" and (nothing := compiled_nothing()):
        raise RuntimeError(nothing)
    return passes
'''

COMPARE = '''
# ---- the comparison: parityfuzz.judge.oracle's own source, with what it reads of parityfuzz.run.trace,
# parityfuzz.judge.verdict and parityfuzz.case.dtypes, over torch tensors (parityfuzz.export.arrays)


$ORACLE


@dataclass(frozen=True)
class Verdict:
    """What a comparison found (the fields of parityfuzz.judge.verdict.Verdict that the oracle sets)."""
    kind: str
    divergence: Divergence | None = None
    note: str = ""
    closeness: float = 0.0


def as_trace(per_rank):
    """One run's records on every rank, as the oracle reads them (parityfuzz.run.trace.Trace)."""
    ranks = []
    for passes in per_rank:
        rank = RankTrace()
        for i, record in enumerate(passes):
            rank.passes.append(record["at"])
            rank.losses.append(None if record["loss"] is None else Rec(*record["loss"]))
            rank.grads.append({name: r if r is None or r == ELSEWHERE else Rec(*r)
                               for name, r in record["grad"].items()})
            rank.params.append({name: r if r == ELSEWHERE else Rec(*r) for name, r in record["param"].items()})
            rank.local_grad_scales.append(record["local"])
            rank.skipped.append(record.get("skipped", False))
            rank.violations += [(i, *violation) for violation in record.get("violations", ())]
        ranks.append(rank)
    return Trace(ranks)
'''


MAIN = '''
def main():
    global DEVICE  # the device this rank trains on, as the plan's calls name it (set_post_optim_event)
    cuda = torch.cuda.is_available() and torch.cuda.device_count() >= WORLD_SIZE
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=120))
    rank = dist.get_rank()
    if dist.get_world_size() != WORLD_SIZE:
        sys.exit(f"this case needs {WORLD_SIZE} ranks: torchrun --nproc-per-node={WORLD_SIZE}")
    device = DEVICE = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    mesh = init_device_mesh(device.type, MESH_SHAPE, mesh_dim_names=MESH_NAMES)
    dp = DP_INDEX[rank]
    if device.type in EXPECTED_ERROR:
        code = refused(EXPECTED_ERROR[device.type], dp, device, mesh)
    else:
        code = compared(dp, device, mesh)
    outcome = [code]
    dist.broadcast_object_list(outcome, src=0)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(outcome[0])  # not sys.exit: gloo's threads can abort the interpreter's teardown


def refused(expected, dp, device, mesh):
    """Torch must refuse this case: the system under test alone, which must raise the expected error on every
    rank (any other error is raised on)."""
    kind, pattern = expected
    try:
        train("system", dp, device, mesh)
        raised = None
    except Exception as e:
        if type(e).__name__ != kind or not re.search(pattern, str(e)):
            raise
        raised = f"{kind}: {str(e).splitlines()[0] if str(e) else ''}"
    everyone = [None] * WORLD_SIZE
    dist.all_gather_object(everyone, raised)
    if dist.get_rank() != 0:
        return 0
    if all(everyone):
        print(f"parity: torch refused the case as it must ({everyone[0]})")
        return 0
    print(f"DIVERGENCE step 0 error {kind}: expected {kind} matching {pattern!r} on every rank; ranks "
          f"{[r for r, e in enumerate(everyone) if not e]} trained")
    return 1


def compared(dp, device, mesh):
    """The reference, the system under test and a perturbed reference, compared on rank 0 by the harness's oracle:
    a value mismatch that stands against that one sample of the noise is compared again against NOISE_SAMPLES of
    them, and only then reported (parityfuzz.judge.verify)."""
    runs = [train("reference", dp, device, mesh), system_run(dp, device, mesh), train("perturbed/0", dp, device, mesh)]
    kind, check, said = judged(runs)
    if kind == MISMATCH and check == "value":
        runs += [train(f"perturbed/{i}", dp, device, mesh) for i in range(1, NOISE_SAMPLES)]
        kind, check, said = judged(runs)
    if dist.get_rank() == 0:
        print(f"DIVERGENCE {said}" if kind == MISMATCH else
              "parity: the system under test trains like the reference" + (f" ({said})" if said else ""))
    return 0 if kind == PASS else 1


def system_run(dp, device, mesh):
    """The system under test's run; where COMPILE restarts it on a warm cache (parityfuzz.run.train._restarted):
    trained, then built anew (its Compiler resets Dynamo) and trained again on the compiled graphs its first run
    cached, every rank's (in a directory rank 0 makes), the second run recorded."""
    if not COMPILE.restart:
        return train("system", dp, device, mesh)
    import shutil
    import tempfile

    directory = [tempfile.mkdtemp(prefix="parityfuzz-graphs-") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(directory, src=0)
    try:
        with graph_caches_in(os.path.join(directory[0], "graphs")):
            train("system", dp, device, mesh)
            run = train("system", dp, device, mesh)
        dist.barrier()
    finally:
        if dist.get_rank() == 0:
            shutil.rmtree(directory[0], ignore_errors=True)
    return run


def judged(runs):
    """The oracle's verdict on every rank's records of ``runs`` (the reference's, the system's, then the perturbed
    ones) as ``(kind, check, what it says)``: rank 0 compares, every rank gets the answer."""
    everyone = [None] * WORLD_SIZE
    dist.all_gather_object(everyone, runs)
    found = [None]
    if dist.get_rank() == 0:
        ref, sut, *noises = (as_trace([everyone[r][k] for r in range(WORLD_SIZE)]) for k in range(len(runs)))
        verdict = compare(ref, sut, Promise(**PROMISE), Tolerance(MODEL_DTYPE, scale_groups=SCALE_GROUPS,
                                                                 unpinned_dtype=UNPINNED_DTYPE), noises)
        d = verdict.divergence
        found = [(verdict.kind, d.check, d.describe()) if d is not None else (verdict.kind, "", verdict.note)]
    dist.broadcast_object_list(found, src=0)
    return found[0]


if __name__ == "__main__":
    main()
'''

# The pieces above must stay plain Python: parse them once here so a typo fails at import, not in a user's run.
for _source in (DATA, TRAIN, COMPARE, MAIN):
    compile(_source.replace("$WRAPPER_HELPERS", "").replace("$PERTURBATION", "").replace("$SEEDS", "")
            .replace("$ORACLE", "").replace("$COMPILER", "").replace("$PADDED", "").replace("$SCALING", ""),
            "<parityfuzz.export.runtime>", "exec")
del _source
