"""The case: one parity run as plain data (schema 2).

A :class:`Case` fully determines one run: the model tree, the named device mesh, the family's plan (a tagged
union member), the generic training spec, the seed, the world size and the delays.  It round-trips through
JSON with a ``schema`` version (schema 1 is upgraded on read) and :meth:`Case.validate` raises
:class:`~parityfuzz.case.errors.CaseError` naming the offending field.  Which system runs it and which reference it
is compared with follow from the family (:mod:`parityfuzz.families`), unless the case names them (plug-in and
test-only faulty systems).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from parityfuzz.case import codec
from parityfuzz.case import dtypes
from parityfuzz.case.checkpoint import Checkpoint, resumed, validate_checkpoint
from parityfuzz.case.compiled import Compile, validate_compile
from parityfuzz.case.errors import CaseError, check
from parityfuzz.case.mesh import MeshSpec, validate_mesh
from parityfuzz.case.model import ModelSpec, validate_model
from parityfuzz.case.plan import Plan
from parityfuzz.case.training import Delay, TrainSpec, validate_delays, validate_train

SCHEMA = 2


@dataclass(frozen=True)
class ExpectedError:
    """An error the system under test must raise on every rank, as torch documents it refusing the case: the
    exception's class name (``RuntimeError``) and a regular expression its message must match.  ``type`` empty:
    none expected (the case trains and is compared)."""

    type: str = ""
    match: str = ""

    def __bool__(self) -> bool:
        return bool(self.type)


@dataclass(frozen=True)
class Case:
    """One parity case: train the model under the family's system and under its reference, and compare.

    ``system`` and ``reference`` (``""``: the family's) name registered systems or give an importable
    ``module:attribute``.
    """

    seed: int
    world_size: int
    model: ModelSpec
    mesh: MeshSpec
    plan: Plan
    train: TrainSpec = TrainSpec()
    delays: tuple[Delay, ...] = ()
    system: str = ""
    reference: str = ""
    #: An error torch must raise for this case wherever it runs (e.g. a combination it documents refusing);
    #: a family may add one that depends on the device (:func:`parityfuzz.judge.expected.expectation`).
    expect_error: ExpectedError = ExpectedError()
    #: Save, load into a fresh system (possibly of another plan, mesh or world size) and train on
    #: (:mod:`parityfuzz.case.checkpoint`).
    checkpoint: Checkpoint = Checkpoint()
    #: ``torch.compile`` of the system under test (:mod:`parityfuzz.case.compiled`); the reference runs eagerly.
    compile: Compile = Compile()
    schema: int = SCHEMA

    @property
    def family(self) -> str:
        return self.plan.family

    def system_name(self) -> str:
        """The system under test: the case's own, or its family's."""
        from parityfuzz import families

        return self.system or families.get(self.family).system

    def reference_name(self) -> str:
        """The reference: the case's own, or the one its family's rule picks."""
        from parityfuzz import families

        return self.reference or families.get(self.family).reference(self)

    # ---- JSON
    def to_dict(self) -> dict:
        return codec.to_jsonable(self)

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=indent is not None)

    @classmethod
    def from_dict(cls, data: Any) -> Case:
        if isinstance(data, dict) and data.get("schema") not in (1, SCHEMA):
            raise CaseError("schema", f"unsupported schema {data.get('schema')!r} (this parityfuzz reads 1 "
                            f"and {SCHEMA})")
        return codec.from_jsonable(cls, codec.upgrade(data), "")

    @classmethod
    def from_json(cls, text: str) -> Case:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise CaseError("", f"not valid JSON: {e}") from None
        return cls.from_dict(data)

    def case_id(self) -> str:
        """Stable content hash (16 hex digits) of the canonical JSON."""
        canon = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()[:16]

    # ---- validation
    def validate(self) -> Case:
        """Raise :class:`CaseError` naming the first offending field; return self."""
        from parityfuzz import families

        check(self.schema == SCHEMA, "schema", f"must be {SCHEMA}")
        check(0 <= self.seed < 2**32, "seed", f"must be in [0, 2**32), got {self.seed}")
        check(self.world_size >= 1, "world_size", f"must be >= 1, got {self.world_size}")
        family = families.get(self.family)
        validate_model(self.model)
        validate_mesh(self.mesh, self.world_size, family.meshes)
        validate_train(self.train, self.model)
        validate_delays(self.delays, self.world_size)
        check(bool(self.expect_error.type) or not self.expect_error.match, "expect_error.type",
              "names the exception class the message belongs to")
        if self.expect_error.match:
            try:
                re.compile(self.expect_error.match)
            except re.error as e:
                raise CaseError("expect_error.match", f"not a regular expression: {e}") from None
        for path, node in self.model.body.walk("body"):
            check(node.kind not in family.refused_leaves, "model.body",
                  f"{self.family} takes no {node.kind} (at {path}): {family.refused_leaves.get(node.kind)}")
        family.validate(self)
        dtypes.check_autocast(self)
        validate_checkpoint(self)
        validate_compile(self)
        return self

    def resumed(self) -> Case:
        """The case its checkpoint event's load resumes (itself where there is none)."""
        return resumed(self) if self.checkpoint else self

    def at_step(self, step: int) -> Case:
        """The case in force at ``step``: from the checkpoint event's step on, the resumed one."""
        return self.resumed() if self.checkpoint and step >= self.checkpoint.step else self

    def mixed_precision(self) -> bool:
        return self.plan.mixed_precision()

    def features(self) -> frozenset[str]:
        """Feature tags of this case (for coverage counts and Hypothesis ``event()``): the generic ones and
        its family's."""
        from parityfuzz import families
        from parityfuzz.case.features import generic_features

        return frozenset(generic_features(self) | families.get(self.family).features(self))
