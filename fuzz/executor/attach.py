"""Ranks launched by torchrun, on one node or many, attached to a driver instead of spawned by it.

On every node::

    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d \\
        --rdzv-endpoint=HOST:29400 --max-restarts=100 -m parityfuzz.executor.attach DRIVER_HOST:DRIVER_PORT

(``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: with the rendezvous store shared with the ranks, torchrun 2.13's
restarts hang in ``init_process_group``, on one node or two; measured here with a four-line script.)

and on the driver's machine ``parityfuzz fuzz --fuzz-attach=0.0.0.0:DRIVER_PORT --world-sizes=8 ...`` (or
``Executor(attach=...)``).  Each rank joins the process group torchrun made (``env://``; NCCL on its node's GPU
``LOCAL_RANK`` where the node has one per local rank, else gloo), connects to the driver twice (cases, and a
control line served by a thread of its own) and then runs cases through the very protocol of the local pool's
ranks (:func:`parityfuzz.executor.worker.serve`): the same verdicts, timeouts and in-step reuse after errors.

Where the pool breaks (a crash, a hang, errors out of step) the driver asks every rank still there for its
stacks over the control line, then tells the ranks to exit: torchrun's agent sees its workers fail and
restarts the whole group (``--max-restarts``), whose new ranks attach again for the next case.  A rank that
dies ends its torchrun job's group the same way.  When the driver closes the pool the ranks leave the process
group and exit 0, and torchrun ends.

Connections are authenticated by ``multiprocessing``'s HMAC handshake with the key in
``$PARITYFUZZ_ATTACH_KEY`` (the same on every node and on the driver; a default for one trusted machine).
"""

from __future__ import annotations

import faulthandler
import os
import queue
import socket
import sys
import tempfile
import threading
import time
import warnings
from multiprocessing.connection import Client, Listener, wait

from parityfuzz.executor.pool import PoolStartError, RankOutcome, RankPool, _tail, process_resources

DEFAULT_KEY = "parityfuzz"


def authkey() -> bytes:
    return os.environ.get("PARITYFUZZ_ATTACH_KEY", DEFAULT_KEY).encode()


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    return host, int(port)


# ------------------------------------------------------------------------------------------------ driver side

class Attachment:
    """The driver's listening socket: ranks connect here each time torchrun (re)starts them; a thread accepts
    them (checking the key) and queues each connection with the hello it sent."""

    warned = False  # about torchrun's shared store, once per driver

    def __init__(self, address: str):
        self.address = address
        self.listener = Listener(parse_address(address), authkey=authkey())
        self.arrived: queue.Queue = queue.Queue()
        self.closed = False
        threading.Thread(target=self._accept, name="parityfuzz-attach", daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn = self.listener.accept()
                if conn.poll(30.0):
                    self.arrived.put((conn, conn.recv()))
                    continue
                conn.close()
            except (OSError, EOFError):  # a connection that failed its handshake, or the listener closed
                continue

    def close(self) -> None:
        self.closed = True
        self.listener.close()


class AttachedPool(RankPool):
    """The ranks of one torchrun job (all its nodes), attached: a :class:`RankPool` whose ranks the driver did not
    spawn.  Waits up to ``start_timeout_s`` for every rank's two connections."""

    def __init__(self, attachment: Attachment, world_size: int, start_timeout_s: float = 300.0):
        self.world_size, self.attachment = world_size, attachment
        self.broken = self.busy = False
        self.runs = 0
        self.conns, self.procs, self.logs = [], [], []
        self.control: list = []
        self.hello: list[dict] = []
        self.dir = tempfile.mkdtemp(prefix="parityfuzz-attached-")
        self._accept(start_timeout_s)

    def _accept(self, timeout: float) -> None:
        """Take the attached ranks' connections, a rank's newer ones replacing older ones (a restarted group)."""
        found: dict[int, dict] = {}
        deadline = time.monotonic() + timeout
        while not (len(found) == self.world_size and all(len(lines) == 2 for lines in found.values())):
            try:
                conn, hello = self.attachment.arrived.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                missing = sorted(set(range(self.world_size)) - {r for r, ls in found.items() if len(ls) == 2})
                for lines in found.values():
                    for c, _ in lines.values():
                        c.close()
                raise PoolStartError(
                    f"ranks {missing} of {self.world_size} did not attach at {self.attachment.address} in "
                    f"{timeout:.0f}s: is torchrun running `-m parityfuzz.executor.attach` against this address, "
                    "with restarts left (--max-restarts)?") from None
            if hello["world_size"] != self.world_size:
                conn.close()  # the rank's loop ends: torchrun's job ends
                raise PoolStartError(f"torchrun's ranks are a world of {hello['world_size']}; the case needs "
                                     f"{self.world_size} (run the fuzzer with --world-sizes={hello['world_size']})")
            lines = found.setdefault(hello["rank"], {})
            if hello["line"] in lines:
                lines[hello["line"]][0].close()
            lines[hello["line"]] = (conn, hello)
        if found[0]["cases"][1].get("agent_store") and not Attachment.warned:
            Attachment.warned = True
            warnings.warn("torchrun shares its rendezvous store with the ranks (the default): on torch 2.13 its "
                          "restarts then hang in init_process_group, so a broken pool never comes back; run torchrun "
                          "with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1", RuntimeWarning, stacklevel=2)
        for r in range(self.world_size):
            conn, hello = found[r]["cases"]
            self.conns.append(conn)
            self.control.append(found[r]["control"][0])
            self.hello.append(hello)
            self.logs.append(hello["log"])

    # what the local pool reads from its processes, the attached one asks its ranks
    def pids(self) -> list[int]:
        return [h["pid"] for h in self.hello]

    def resources(self) -> list[dict]:
        """Each rank's resident MiB, threads and descriptors, asked over its control line (empty if one does not
        answer)."""
        out = []
        for conn in self.control:
            try:
                conn.send(("resources",))
                if not conn.poll(5.0):
                    return []
                out.append(conn.recv())
            except (OSError, EOFError, ValueError):
                return []
        return [r for r in out if r] if all(out) else []

    def recycle(self) -> None:
        """Healthy ranks grown past the resource ceiling: they exit 1, and torchrun starts fresh ones."""
        self.broken = True
        self.close()

    def _handles(self, r: int) -> list:
        return [self.conns[r]]

    def _collect(self, r: int) -> RankOutcome | None:
        try:
            kind, body = self.conns[r].recv()
        except (EOFError, OSError):  # its connection closed: the rank died (torchrun's agent has its exit code)
            return RankOutcome(r, "crash", exitcode=None)
        return RankOutcome(r, "ok", result=body) if kind == "ok" else RankOutcome(r, "error", error=body)

    def _dump_stacks(self, ranks) -> None:
        """Every rank still there dumps its threads' stacks into its log and sends the log's tail back."""
        self._stacks = {}
        asked = []
        for r in ranks:
            try:
                self.control[r].send(("dump",))
                asked.append(r)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 3.0
        while asked and time.monotonic() < deadline:
            for conn in wait([self.control[r] for r in asked], timeout=max(0.0, deadline - time.monotonic())):
                r = self.control.index(conn)
                asked.remove(r)
                try:
                    self._stacks[r] = conn.recv()
                except (EOFError, OSError):
                    pass

    def _log(self, r: int) -> str:
        stacks = getattr(self, "_stacks", {}).get(r)
        if stacks is not None:
            return stacks
        where = self.hello[r]
        local = where["host"] == socket.gethostname() and os.path.exists(where["log"])
        return _tail(where["log"]) if local else f"(rank {r}'s output is in {where['log']} on {where['host']})"

    def close(self, graceful: bool = True) -> None:
        """Healthy: the ranks leave and exit 0 (the torchrun job ends).  Broken: they exit 1, and torchrun's
        agent restarts the group, which attaches again."""
        healthy = graceful and not self.broken and not self.busy
        for r in range(len(self.conns)):
            try:
                if healthy:
                    self.conns[r].send(("stop",))
                else:
                    self.control[r].send(("exit", 1))
            except (OSError, ValueError):
                pass
        for conn in self.conns + self.control:
            conn.close()
        self.conns, self.control = [], []


# -------------------------------------------------------------------------------------------------- rank side

def _connect(address: str, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return Client(parse_address(address), authkey=authkey())
        except (ConnectionRefusedError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _control(conn, log_path: str) -> None:
    """The rank's control line, served by a thread of its own while the main thread may be stuck in a
    collective: ``dump`` (every thread's stack into the log, the log's tail sent back), ``exit``."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return  # the driver closed the line: the case line says whether it stopped the run or went away
        if msg[0] == "resources":
            try:
                conn.send(process_resources(os.getpid()))
            except (OSError, KeyError, ValueError):
                conn.send({})
        elif msg[0] == "dump":
            with open(log_path, "a") as f:
                faulthandler.dump_traceback(file=f, all_threads=True)
            conn.send(_tail(log_path))
        elif msg[0] == "exit":
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(msg[1])


def main(argv: list[str] | None = None) -> None:
    import argparse
    from datetime import timedelta

    parser = argparse.ArgumentParser(prog="python -m parityfuzz.executor.attach",
                                     description="A torchrun-launched rank that runs a parityfuzz driver's cases")
    parser.add_argument("driver", metavar="HOST:PORT", help="the driver's --fuzz-attach address")
    parser.add_argument("--log-dir", default=tempfile.gettempdir(), help="where each rank writes its output")
    parser.add_argument("--connect-timeout", type=float, default=300.0, metavar="SECONDS")
    parser.add_argument("--pg-timeout", type=float, default=300.0, metavar="SECONDS")
    args = parser.parse_args(argv)

    from parityfuzz.executor.worker import _redirect_output, leave, prepare, serve

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    log_path = os.path.join(args.log_dir, f"parityfuzz-attached-rank{rank}-{os.getpid()}.log")
    _redirect_output(log_path)
    import torch
    import torch.distributed as dist

    from parityfuzz.systems import RankContext

    local_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = "nccl" if local_gpus >= int(os.environ.get("LOCAL_WORLD_SIZE", 1)) else "gloo"
    device = prepare(backend, local_rank)
    dist.init_process_group(backend, timeout=timedelta(seconds=args.pg_timeout))  # torchrun's env://
    ctx = RankContext(rank=rank, world_size=world_size, device=device)
    hello = {"rank": rank, "world_size": world_size, "pid": os.getpid(), "host": socket.gethostname(),
             "log": log_path, "restart": restart, "backend": backend,
             "agent_store": os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"}
    cases = _connect(args.driver, args.connect_timeout)
    cases.send({**hello, "line": "cases"})
    control = _connect(args.driver, args.connect_timeout)
    control.send({**hello, "line": "control"})
    print(f"[parityfuzz] rank {rank} of {world_size} (restart {restart}, {backend}) attached to {args.driver}",
          flush=True)
    threading.Thread(target=_control, args=(control, log_path), name="parityfuzz-control", daemon=True).start()
    # Told to stop: the run is over, and so is the torchrun job.  The driver gone or the pool broken: exit 1, so
    # that torchrun's agent restarts the group (a rank exiting 0 would wait for the others at the exit barrier).
    leave(0 if serve(cases, ctx, log_path) else 1)


if __name__ == "__main__":
    main()
