"""The one error a malformed case raises, naming the dotted field."""

from __future__ import annotations


class CaseError(ValueError):
    """A case (or its JSON) is malformed.  ``field`` is a dotted path into the case."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


def check(ok: bool, field_path: str, message: str) -> None:
    """Raise :class:`CaseError` at ``field_path`` unless ``ok``."""
    if not ok:
        raise CaseError(field_path, message)
