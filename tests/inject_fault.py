"""Run an exported script (parityfuzz.export) with a test fault of tests/faults/ injected inside torch first, as the
fuzzer's rank does before it sets the faulty system up:

    torchrun --nproc-per-node=N tests/inject_fault.py FAULT CASE.json SCRIPT

Only faults that patch torch itself (``_Injected`` subclasses acting inside FSDP2 or the TP styles) mean
anything here: the script is plain torch, and the reference it also trains (DDP, or the emulation of a
mixed-precision policy) goes through none of that code.
"""

import os
import runpy
import sys

import torch

from parityfuzz.case import Case
from parityfuzz.systems import RankContext
from tests import faults
from tests.faults.injection import _Injected


def main() -> None:
    name, case_path, script = sys.argv[1:4]
    cls = getattr(faults, name)
    if not issubclass(cls, _Injected):
        sys.exit(f"{name} is not a fault inside torch: an exported script cannot carry it")
    fault = object.__new__(cls)  # only what inject() reads: the case and this rank's place
    with open(case_path) as f:
        fault.case = Case.from_json(f.read())
    fault.ctx = RankContext(rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]),
                            device=torch.device("cpu"))
    fault.inject()
    sys.argv = [script]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
