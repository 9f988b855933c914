"""Parity cases as plain data (schema 2).

- :mod:`parityfuzz.case.model`: the model tree;
- :mod:`parityfuzz.case.mesh`: named N-D meshes and each rank's coordinates;
- :mod:`parityfuzz.case.training`: the generic training spec and delays;
- :mod:`parityfuzz.case.plan`: the base of the families' plans;
- :mod:`parityfuzz.case.compiled`: ``torch.compile`` of the system under test;
- :mod:`parityfuzz.case.checkpoint`: checkpoint events (save, load into the resumed case, train on);
- :mod:`parityfuzz.case.core`: the :class:`Case` (a family's plan as a tagged union), JSON and validation;
- :mod:`parityfuzz.case.codec`: strict JSON and the upgrade of older schemas;
- :mod:`parityfuzz.case.features`: the feature tags every case has.

Family plans live with their family (:mod:`parityfuzz.families`).  This package imports neither torch nor
hypothesis: cases are data, and the strategies, the builder and the executor are the only places that give
them meaning.
"""

from parityfuzz.case.core import SCHEMA, Case, ExpectedError, Plan
from parityfuzz.case.errors import CaseError
from parityfuzz.case.mesh import AXES, MeshSpec
from parityfuzz.case.model import (ACTIVATIONS, CONTAINER_KINDS, LEAF_KINDS, LEAF_SUBMODULES, PARAM_KINDS, ModelSpec,
                             Node, child_names, under)
from parityfuzz.case.training import (AUTOCASTS, DELAY_POINTS, DTYPES, LOSSES, OPTIMIZERS, SCHEDULERS, ZERO_GRAD_MODES, Delay,
                                Freeze, ParamGroup, TrainSpec)

__all__ = ["ACTIVATIONS", "AUTOCASTS", "AXES", "CONTAINER_KINDS", "DELAY_POINTS", "DTYPES", "LEAF_KINDS", "LEAF_SUBMODULES",
           "LOSSES", "OPTIMIZERS", "PARAM_KINDS", "SCHEDULERS", "SCHEMA", "ZERO_GRAD_MODES", "Case", "CaseError",
           "Delay", "ExpectedError", "Freeze", "MeshSpec", "ModelSpec", "Node", "ParamGroup", "Plan", "TrainSpec", "child_names",
           "under"]
