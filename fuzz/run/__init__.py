"""Run: what a rank does with a case (the torch side).  :mod:`.build` makes the model and each rank's inputs,
:mod:`.train` drives any system through the case's training loop and records a :mod:`.trace` (tensors as data:
:mod:`.record`; each module's activations: :mod:`.activations`; the collectives issued: :mod:`.collectives`).
A part's torch calls, as data that a system runs and an exported script prints: :mod:`.calls` (torch-free).
The systems under test and their references are :mod:`parityfuzz.systems`, the processes that run them
:mod:`parityfuzz.executor`, the checkpoint events :mod:`parityfuzz.checkpoint`."""
