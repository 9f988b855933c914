"""The rank process: joins the process group once, then runs cases until told to stop.

Output goes to a per-rank log file (truncated at each case) so the driver can
show a crashed or hung rank's last words; ``faulthandler`` dumps every
thread's stack there on SIGUSR1 and on fatal signals.  A rank exits on its own
when its driver dies.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from datetime import timedelta


def _die_with_parent(driver_pid: int) -> None:
    """Exit when the process that started this rank dies: the driver (``spawn``) or the fork server it started
    (:mod:`parityfuzz.executor.zygote`, which dies with the driver)."""
    parent = os.getppid()
    try:  # Linux: the kernel kills us the moment the parent dies.
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass

    def driver_alive() -> bool:
        try:
            os.kill(driver_pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            pass
        return True

    def watch():  # Elsewhere (and as a backstop): poll for re-parenting, and for the driver itself.
        while True:
            if os.getppid() != parent or not driver_alive():
                os._exit(70)
            time.sleep(0.5)

    threading.Thread(target=watch, name="parityfuzz-parent-watch", daemon=True).start()


def _redirect_output(log_path: str) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)


def innermost_frame(e: BaseException) -> str:
    """Where an exception was raised, as ``path/inside/package.py:function``: the innermost frame in torch if
    the traceback reaches torch, else the innermost frame (a bug's fingerprint that survives shrinking)."""
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return ""
    in_torch = [f for f in frames if f"{os.sep}torch{os.sep}" in f.filename]
    frame = (in_torch or frames)[-1]
    parts = frame.filename.split(os.sep)
    keep = parts[parts.index("torch"):] if "torch" in parts else parts[-2:]
    return f"{'/'.join(keep)}:{frame.name}"


def _inside_a_collective(e: BaseException) -> bool:
    """Whether the error came from inside torch.distributed's collectives or its backend (a broken
    connection, a timeout): the process groups may be unusable however the ranks' counts agree."""
    import torch.distributed as dist

    return isinstance(e, dist.DistError) or innermost_frame(e).startswith("torch/distributed/distributed_c10d.py")


def _collective_state(ctx) -> dict | None:
    """Where this rank's process groups stand after a failed case, its own groups released: how many groups it
    has made, and for each live group how many collectives it has issued there.  Where every rank failed and
    their states agree (each group's count the same on every rank holding it), no collective is half done and
    the pool runs the next case on the same ranks (:meth:`parityfuzz.executor.pool.RankPool.run`); None where it
    cannot tell."""
    from torch.distributed import distributed_c10d as c10d

    try:
        ctx.release_groups()
        counts = {c10d._world.pg_names[pg]: pg._get_sequence_number_for_group() for pg in list(c10d._world.pg_map)}
        return {"groups_made": c10d._world.group_count, "collectives": counts}
    except Exception:  # noqa: BLE001 - a backend without sequence numbers: the pool is replaced
        return None


def prepare(backend: str, device_index: int):
    """This process as a rank: one CPU thread, quiet warnings, its device (under NCCL its own GPU,
    :mod:`parityfuzz.executor.devices`, with deterministic kernels).  Returns the device."""
    import torch

    torch.set_num_threads(1)
    # FSDP2 warns for every wrapped module whose output is a view; our models never modify outputs in place,
    # and the noise would bury a crashed or hung rank's last words.
    warnings.filterwarnings("ignore", message=r".*returned a view tensor.*")
    if backend != "nccl":
        return torch.device("cpu")
    torch.cuda.set_device(device_index)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    return torch.device("cuda", device_index)


#: The key of an answer's traces under which a rank says how many seconds each role's run took (where a case's
#: time goes: ``python -m parityfuzz.frontends.bench --profile``).
SECONDS = "seconds"
#: Its keys beside the roles': the seconds the isolation snapshot took to put the rank back after the roles, and
#: those releasing the process groups the case made.
RESTORE, RELEASE = "restore rank state", "release groups"


def serve(conn, ctx, log_path: str) -> bool:
    """Run the cases the driver sends over ``conn`` until it says stop (returns True) or goes away (False):
    ``("run", case JSON, roles, job)`` is answered ``("ok", traces)`` (with each role's seconds under
    :data:`SECONDS`) or ``("error", details)``.  The protocol of
    the local pool's ranks and of ranks attached from torchrun (:mod:`parityfuzz.executor.attach`)."""
    from parityfuzz.case import Case
    from parityfuzz.executor.isolation import Snapshot
    from parityfuzz.run.train import run_system

    clean = Snapshot.take()
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return False
        if msg[0] == "stop":
            return True
        os.truncate(log_path, 0)
        case, roles = Case.from_json(msg[1]), msg[2]
        job = msg[3] if len(msg) > 3 else {}  # a checkpoint event's segment and scratch directory; probe
        traces, role, seconds = {}, roles[0], {}
        try:
            for role in roles:
                began = time.perf_counter()
                traces[role] = run_system(case, role, ctx, segment=job.get("segment"),
                                           scratch=job.get("scratch", ""), probe=job.get("probe", False))
                seconds[role] = time.perf_counter() - began
                began = time.perf_counter()
                undone = clean.restore()
                seconds[RESTORE] = seconds.get(RESTORE, 0.0) + time.perf_counter() - began
                if undone:
                    print(f"[parityfuzz] {role} left changes behind, undone: {', '.join(undone)}", flush=True)
        except BaseException as e:  # noqa: BLE001 - any failure is a verdict, reported as data
            clean.restore()
            error = {"role": role, "type": type(e).__name__, "message": str(e)[:2000],
                     "traceback": traceback.format_exc(), "torch_frame": innermost_frame(e)}
            if not _inside_a_collective(e):  # the pool may run the next case here if every rank is in step
                error["collectives"] = _collective_state(ctx)
            conn.send(("error", error))
            continue
        began = time.perf_counter()
        ctx.release_groups()
        seconds[RELEASE] = time.perf_counter() - began
        traces[SECONDS] = seconds
        conn.send(("ok", traces))


def leave(code: int = 0) -> None:
    """Leave the process group and exit, skipping the interpreter's teardown (gloo threads can abort it)."""
    import torch.distributed as dist

    try:
        dist.destroy_process_group()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def worker_main(rank: int, world_size: int, store_path: str, conn, backend: str, log_path: str,
                parent_pid: int, pg_timeout_s: float, device_index: int = -1, environ: dict | None = None) -> None:
    # Ctrl-C reaches the whole foreground process group: the driver decides, ranks carry on until told.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent_pid)
    if environ is not None:  # forked from the fork server: the driver's environment now, not the server's at its start
        os.environ.clear()
        os.environ.update(environ)
        from parityfuzz import families

        families.load_environment()
    _redirect_output(log_path)
    import torch.distributed as dist

    from parityfuzz.systems import RankContext

    device = prepare(backend, device_index)
    store = dist.FileStore(store_path, world_size)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=pg_timeout_s))
    ctx = RankContext(rank=rank, world_size=world_size, device=device)
    conn.send(("ready", os.getpid()))
    serve(conn, ctx, log_path)
    leave(0)
