"""The template rank processes are forked from: multiprocessing's fork server, made to import torch and the rank's
code once (``set_forkserver_preload`` names this module), so that a pool starts by forking that process instead of
starting an interpreter and importing torch per rank (``spawn``).

Importing this module in the fork server also ties the server's life to the driver's: where the environment names
the driver (:data:`DRIVER`) as this process's parent, the kernel sends this process SIGKILL the moment the driver
dies (Linux ``PR_SET_PDEATHSIG``), and each rank asks the same of its own parent, this server
(:func:`parityfuzz.executor.worker.worker_main`): a SIGKILL of the driver takes the server, and the server the ranks.
Imported anywhere else, it only imports.
"""

from __future__ import annotations

import os
import signal

#: The environment variable in which the driver names itself to the fork server it starts.
DRIVER = "PARITYFUZZ_FORKSERVER_DRIVER"

#: What a rank imports to run a case, imported here once for every rank forked later: torch and the parallel APIs
#: the systems use, the systems and the trainer.
PRELOAD = (
    "torch",
    "torch.distributed",
    "torch.distributed.fsdp",
    "torch.distributed.tensor.parallel",
    "torch.distributed.pipelining",
    "torch.distributed.checkpoint",
    "torch.nn.parallel",
    "parityfuzz.executor.worker",
    "parityfuzz.run.train",
    "parityfuzz.systems",
)


def _die_with_the_driver() -> None:
    driver = os.environ.get(DRIVER, "")
    if not driver.isdigit() or int(driver) != os.getppid():
        return  # not the fork server of a parityfuzz driver
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if os.getppid() != int(driver):  # the driver died before the request took effect
        os._exit(70)


_die_with_the_driver()

for _name in PRELOAD:
    __import__(_name)
