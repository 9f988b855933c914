"""The known torch bugs, read from ``corpus/known_bugs.toml`` (the data file beside the corpus that a person edits
after triage; its header says what each field means).

A record's ``precondition`` names a predicate ``<owner>:<function>`` (or a list of them, one per situation a merged
record covers: any one holding is enough): the owner is a family (its folder's
``known.py``) or a dimension of every family (:data:`DIMENSIONS`); nothing here names a family.  Reading checks
every field and names the file, the record and the field it refuses.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from parityfuzz import families
from parityfuzz.case import Case
from parityfuzz.case.plan import Plan
from parityfuzz.judge.verdict import Verdict

#: The shipped data file: ``corpus/known_bugs.toml`` of the checkout parityfuzz runs from.
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "corpus" / "known_bugs.toml"

#: Owners of preconditions that are not families: a dimension every family draws -> its package.
DIMENSIONS = {"checkpoint": "parityfuzz.checkpoint", "compile": "parityfuzz.systems.compiled",
              "activation_checkpoint": "parityfuzz.parts.activation_checkpoint"}

#: What a bug does to a user, the most serious first: the tables of docs/known-bugs.md list the records in this
#: order.  A silent wrong result (training, a state dict, a dtype) comes before memory or placement, a hang and a
#: loud crash.
BUG_KINDS = ("wrong training", "wrong state dict", "wrong dtype", "memory or placement", "hang", "crash")
#: The kind a mismatch signature shows, by the oracle's check (every other check: wrong training).
MISMATCH_KINDS = {"dtype": "wrong dtype", "checkpoint": "wrong state dict", "no_error": "crash",
                  "local_shape": "memory or placement"}
#: The kind the harness's own invariant checks show (an ``InvariantViolation`` from this frame: what it checks).
INVARIANT_KINDS = {"fully_shard/system.py:check_resharded": "memory or placement",
                   "fsdp1/system.py:_check_gradient_shape": "wrong training"}
#: ``api``'s labels, by rule from the APIs a record's trigger needs (:func:`api_by_rule`).
API_LABELS = ("public", "experimental", "private")
#: APIs whose docstring calls them experimental though their path does not say so.
DOCUMENTED_EXPERIMENTAL = ("torch.distributed.optim.ZeroRedundancyOptimizer",)
STATUSES = ("reported", "related only", "none found", "design")
TABLES = ("training", "checkpoint")
#: The fields a signature may have for each verdict kind (:meth:`Verdict.signature_fields`).
SIGNATURE_FIELDS = {"mismatch": {"check", "tensor"}, "error": {"role", "exception", "frame"},
                    "crash": {"exitcode"}, "hang": set()}


class KnownBugsError(ValueError):
    """The known-bug file is malformed: the message names the file, the record and the field."""


@dataclass(frozen=True)
class Signature:
    """A kind of failure: each field holds the values it matches (any one of them)."""

    fields: tuple[tuple[str, tuple], ...]

    def matches(self, verdict: Verdict) -> bool:
        got = verdict.signature_fields()
        return set(got) == {k for k, _ in self.fields} and all(got[k] in values for k, values in self.fields)

    def strings(self) -> list[str]:
        """Every :meth:`Verdict.bug_signature` this signature matches."""
        return [":".join(map(str, combo)) for combo in itertools.product(*(values for _, values in self.fields))]


def signature_kind(fields: dict) -> str:
    """The kind of failure one signature shows (:data:`BUG_KINDS`)."""
    verdict = fields["verdict"][0]
    if verdict == "mismatch":
        checks = fields.get("check", ())
        return min((MISMATCH_KINDS.get(c, "wrong training") for c in checks), key=BUG_KINDS.index)
    if verdict == "hang":
        return "hang"
    if verdict == "error" and "InvariantViolation" in fields.get("exception", ()):
        frames = fields.get("frame", ())
        unknown = [f for f in frames if f not in INVARIANT_KINDS]
        if unknown:
            raise KeyError(f"the harness invariant {unknown[0]!r} has no kind in INVARIANT_KINDS")
        return min((INVARIANT_KINDS[f] for f in frames), key=BUG_KINDS.index)
    return "crash"


def kind_by_rule(signatures: tuple[Signature, ...]) -> str:
    """A record's kind: the most serious its signatures show (a record that crashes in one form and trains wrongly
    in another is wrong training)."""
    return min((signature_kind(dict(s.fields)) for s in signatures), key=BUG_KINDS.index)


def api_by_rule(apis: tuple[str, ...]) -> str:
    """``private`` where an API the trigger needs lies under an underscore name (``torch.distributed._composable``),
    else ``experimental`` where one's path or docstring says so, else ``public``."""
    if any(part.startswith("_") for api in apis for part in api.split(".")):
        return "private"
    if any("experimental" in api.split(".") or api in DOCUMENTED_EXPERIMENTAL for api in apis):
        return "experimental"
    return "public"


@dataclass(frozen=True)
class Upstream:
    status: str  # one of STATUSES
    #: Reports this bug is (the first, where the status is "reported") or is related to: ``owner/repo#N``.
    links: tuple[str, ...]
    #: The searches that found nothing, and what each link is.
    notes: str


@dataclass(frozen=True)
class KnownBug:
    id: str
    #: What the run summary and the report call it ("known torch bug, <title>").
    title: str
    families: tuple[str, ...]
    #: ``<owner>:<function>`` predicates: the case meets the precondition where any holds.
    precondition: tuple[str, ...]
    signatures: tuple[Signature, ...]
    #: Triaged corpus files that show it, relative to the corpus directory.
    files: tuple[str, ...]
    #: The torch versions its files were recorded with.
    torch_seen: tuple[str, ...]
    kind: str
    #: The torch APIs the trigger needs (dotted paths); ``api`` is their label by :func:`api_by_rule`.
    apis: tuple[str, ...]
    api: str
    #: The table of docs/known-bugs.md it is listed in, and its row there (markdown).
    table: str
    summary: str
    #: How torch goes wrong, as far as triage found.
    mechanism: str
    #: Where in torch's source the mechanism lies: ``torch/<file>.py:<qualified name>:<line>`` (the line in the
    #: first of ``torch_seen``).
    source: tuple[str, ...]
    #: What torch promises that the bug breaks: the documentation or source line (file, API, quoted words).
    violates: str
    upstream: Upstream
    #: The first torch release whose replay of every file of the record passes (``parityfuzz versions``); ``""``
    #: while none does.  From that release on, its files are regression cases: they must pass
    #: (:func:`parityfuzz.triage.replay.expected`).
    fixed_in: str = ""

    def fixed(self, torch_version: str) -> bool:
        """Whether ``torch_version`` (``torch.__version__``) is ``fixed_in`` or later."""
        return bool(self.fixed_in) and version_key(torch_version) >= version_key(self.fixed_in)

    def applies(self, case: Case) -> bool:
        """Whether ``case`` meets the precondition (its family is one of the record's), by the predicates that read
        its plan (:func:`reads`)."""
        merged = len(self.precondition) > 1
        return case.family in self.families and any(
            resolve_precondition(p)(case) for p in self.precondition if reads(p, case, merged))

    def explains(self, case: Case, verdict: Verdict) -> bool:
        """Whether this bug explains ``verdict`` on ``case``: on the case itself, or (a checkpoint event) on the
        case the load resumes, which trains the steps after it."""
        if verdict.ok or not any(s.matches(verdict) for s in self.signatures):
            return False
        return self.meets(case)

    def meets(self, case: Case) -> bool:
        """Whether ``case`` or (a checkpoint event) the case its load resumes meets the precondition: the cases
        :meth:`explains` looks at."""
        return any(self.applies(c) for c in ((case, case.resumed()) if case.checkpoint else (case,)))

    def lists(self, corpus_file: Path | str) -> bool:
        """Whether ``corpus_file`` (any path ending in ``<family dir>/<id>.json``) is one of this bug's files."""
        tail = Path(corpus_file).parts[-2:]
        return any(Path(f).parts[-2:] == tail for f in self.files)

    def signature_strings(self) -> list[str]:
        return [s for sig in self.signatures for s in sig.strings()]


def reads(predicate: str, case: Case, merged: bool = True) -> bool:
    """Whether the predicate ``<owner>:<function>`` of a record reads ``case``'s plan.  A record of one predicate
    gives it every family the record names (fsdp2_tp's reads the pipeline's tensor-parallel plans alike); in a
    ``merged`` record (one predicate per situation) a dimension's reads any case, a family's its own family's and
    those built on the same part (fsdp1's and fsdp1_tp's plans are both the FSDP1 part's), not another family's:
    the second 30-minute run of 2026-11-28 stopped its checkpoint target where a merged record's composable
    predicate met an fsdp2_tp plan a checkpoint load resumed."""
    owner = predicate.partition(":")[0]
    if not merged or owner not in families.MODULES or owner == case.family:
        return True
    shared = set(type(case.plan).__mro__) & set(families.get(owner).plan_type.__mro__)
    return bool(shared - {Plan, object})


@functools.cache
def resolve_precondition(name: str) -> Callable[[Case], bool]:
    """The predicate ``<owner>:<function>`` names (:class:`KnownBugsError` where there is none)."""
    owner, _, function = name.partition(":")
    if owner in families.MODULES:
        module = families.MODULES[owner] + ".known"
    elif owner in DIMENSIONS:
        module = DIMENSIONS[owner] + ".known"
    else:
        raise KnownBugsError(f"precondition {name!r}: no family or dimension {owner!r} (families: "
                             f"{', '.join(sorted(families.MODULES))}; dimensions: {', '.join(DIMENSIONS)})")
    predicate = getattr(importlib.import_module(module), function, None) if function else None
    if not callable(predicate):
        raise KnownBugsError(f"precondition {name!r}: {module} has no function {function!r}")
    return predicate


def load(path: Path | str = DEFAULT_PATH) -> tuple[KnownBug, ...]:
    """Every record of the known-bug file at ``path``, checked."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise KnownBugsError(f"{path}: cannot read the known-bug file: {e}") from e
    except tomllib.TOMLDecodeError as e:
        raise KnownBugsError(f"{path}: not valid TOML: {e}") from e
    unknown = set(data) - {"bug"}
    if unknown:
        raise KnownBugsError(f"{path}: unknown top-level keys {sorted(unknown)} (only [[bug]] records)")
    bugs = tuple(_record(path, i, raw) for i, raw in enumerate(data.get("bug", [])))
    seen: dict[str, int] = {}
    for i, b in enumerate(bugs):
        if b.id in seen:
            raise KnownBugsError(f"{path}: bug #{i + 1} ({b.id}): field 'id': also the id of bug #{seen[b.id] + 1}")
        seen[b.id] = i
    return bugs


@functools.cache
def shipped() -> tuple[KnownBug, ...]:
    """The records of the shipped file (read once per process)."""
    return load(DEFAULT_PATH)


def known_bug(case: Case, verdict: Verdict, bugs: tuple[KnownBug, ...] | None = None) -> KnownBug | None:
    """The known bug that explains ``verdict`` on ``case``, if any."""
    return next((b for b in (shipped() if bugs is None else bugs) if b.explains(case, verdict)), None)


_FIELDS = {"id", "title", "families", "precondition", "signatures", "files", "torch_seen", "kind", "apis", "api",
           "table", "summary", "mechanism", "source", "violates", "upstream"}
#: The fields a record may leave out.
_OPTIONAL = {"fixed_in"}


def version_key(version: str) -> tuple[int, ...]:
    """A torch version's release numbers (``2.14.1+cu130`` -> ``(2, 14, 1)``), for ordering."""
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0])[:3])


def _record(path: Path, index: int, raw: dict) -> KnownBug:
    where = f"{path}: bug #{index + 1}" + (f" ({raw['id']})" if isinstance(raw.get("id"), str) else "")

    def fail(field: str, why: str):
        raise KnownBugsError(f"{where}: field {field!r}: {why}")

    for f in sorted(_FIELDS - set(raw)):
        fail(f, "missing")
    for f in sorted(set(raw) - _FIELDS - _OPTIONAL):
        fail(f, f"unknown field (fields: {', '.join(sorted(_FIELDS | _OPTIONAL))})")
    fixed_in = raw.get("fixed_in", "")
    if fixed_in and not (isinstance(fixed_in, str) and re.fullmatch(r"\d+\.\d+\.\d+", fixed_in)):
        fail("fixed_in", f"{fixed_in!r} is not a torch release (2.14.1)")

    def text(field: str, value=None) -> str:
        value = raw[field] if value is None else value
        if not isinstance(value, str) or not value.strip():
            fail(field, "must be a non-empty string")
        return value

    def texts(field: str, value=None) -> tuple[str, ...]:
        value = raw[field] if value is None else value
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            fail(field, "must be a non-empty list of strings")
        return tuple(value)

    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", text("id")):
        fail("id", f"{raw['id']!r} is not a lowercase slug (letters, digits, hyphens)")
    names = texts("families")
    for name in names:
        if name not in families.MODULES:
            fail("families", f"unknown family {name!r} (known: {', '.join(sorted(families.MODULES))})")
    try:
        conditions = (text("precondition"),) if isinstance(raw["precondition"], str) else texts("precondition")
        for condition in conditions:
            resolve_precondition(condition)
    except KnownBugsError as e:
        fail("precondition", str(e))
    for field, allowed in (("kind", BUG_KINDS), ("table", TABLES)):
        if raw[field] not in allowed:
            fail(field, f"{raw[field]!r} is not one of {', '.join(allowed)}")
    for api in texts("apis"):
        if not re.fullmatch(r"torch(\.\w+)+", api):
            fail("apis", f"{api!r} is not a dotted path under torch (torch.distributed.fsdp.fully_shard)")
    rule = api_by_rule(tuple(raw["apis"]))
    if raw["api"] != rule:
        fail("api", f"{raw['api']!r}, where the rule gives {rule!r} for its apis "
                    f"(private: an underscore name; experimental: said so by the path or the docstring)")
    for place in texts("source"):
        if not re.fullmatch(r"torch/[\w/]+\.py:[\w.]+:\d+", place):
            fail("source", f"{place!r} is not torch/<file>.py:<qualified name>:<line>")
    if not re.search(r"torch/\S+\.py", text("violates")):
        fail("violates", "must name the torch file whose documentation or source line the bug breaks")
    for f in texts("files"):
        if not re.fullmatch(r"[a-z0-9_]+/[0-9a-f]{16}\.json", f):
            fail("files", f"{f!r} is not <family dir>/<16 hex digits>.json (relative to the corpus directory)")
    signatures = raw["signatures"]
    if not isinstance(signatures, list) or not signatures:
        fail("signatures", "must be a non-empty list of tables")
    up = raw["upstream"]
    if not isinstance(up, dict) or set(up) != {"status", "links", "notes"}:
        fail("upstream", "must be a table with status, links and notes")
    if up["status"] not in STATUSES:
        fail("upstream.status", f"{up['status']!r} is not one of {', '.join(STATUSES)}")
    if not isinstance(up["links"], list) or not all(isinstance(x, str) and re.fullmatch(r"[\w.-]+/[\w.-]+#\d+", x)
                                                    for x in up["links"]):
        fail("upstream.links", "must be a list of owner/repo#N")
    if up["status"] in ("reported", "related only") and not up["links"]:
        fail("upstream.links", f"a {up['status']!r} record names its reports")
    if up["status"] == "none found" and "searched" not in text("upstream.notes", up["notes"]):
        fail("upstream.notes", "say what was searched ('searched: ...'), so the next person can redo it")
    parsed = tuple(_signature(fail, i, s) for i, s in enumerate(signatures))
    try:
        kind = kind_by_rule(parsed)
    except KeyError as e:
        fail("signatures", e.args[0])
    if raw["kind"] != kind:
        fail("kind", f"{raw['kind']!r}, where its signatures show {kind!r} (the most serious of them: "
                     f"{', '.join(BUG_KINDS)})")
    return KnownBug(
        id=raw["id"], title=text("title"), families=names, precondition=conditions,
        signatures=parsed, files=texts("files"),
        torch_seen=texts("torch_seen"), kind=raw["kind"], apis=tuple(raw["apis"]), api=raw["api"],
        table=raw["table"], summary=text("summary"), mechanism=text("mechanism"), source=tuple(raw["source"]),
        violates=raw["violates"],
        upstream=Upstream(up["status"], tuple(up["links"]), text("upstream.notes", up["notes"])), fixed_in=fixed_in)


def _signature(fail, index: int, raw) -> Signature:
    field = f"signatures[{index}]"
    if not isinstance(raw, dict) or raw.get("verdict") not in SIGNATURE_FIELDS:
        fail(field, f"must be a table whose verdict is one of {', '.join(SIGNATURE_FIELDS)}")
    expected = SIGNATURE_FIELDS[raw["verdict"]]
    if set(raw) - {"verdict"} != expected:
        fail(field, f"a {raw['verdict']} signature has the fields {', '.join(sorted(expected)) or 'none'}")
    order = {"mismatch": ("check", "tensor"), "error": ("role", "exception", "frame"), "crash": ("exitcode",),
             "hang": ()}[raw["verdict"]]
    fields = [("verdict", (raw["verdict"],))]
    for key in order:
        values = raw[key] if isinstance(raw[key], list) else [raw[key]]
        kind = int if key == "exitcode" else str
        if not values or not all(isinstance(v, kind) and not isinstance(v, bool) for v in values):
            fail(f"{field}.{key}", f"must be a {kind.__name__} or a non-empty list of them")
        fields.append((key, tuple(values)))
    return Signature(tuple(fields))
