"""What every cloud's error-code table (``providers/<cloud>/error_codes.py``) answers the same way.

A table is three parts: ``DOCUMENTED`` (the codes each call's reference page lists), ``ALSO_KNOWN``
(codes seen in the wild, with a note) and ``CLASS_SETS`` (which project error a code becomes). A
listed code in no class set is the caller's mistake: ``InvalidRequest``. Only the rules for codes a
table does not hold differ from cloud to cloud; those stay in each ``classify``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler.errors import InvalidRequest, ProviderError

__all__ = ["ClassSets", "codes_of", "listed_class"]

ClassSets = tuple[tuple[type[ProviderError], frozenset[str]], ...]


def codes_of(documented: Mapping[str, Iterable[str]], also_known: Mapping[str, str]) -> list[str]:
    """Every code a table holds (documented and also known), sorted."""
    found: set[str] = set(also_known)
    for codes in documented.values():
        found.update(codes)
    return sorted(found)


def listed_class(code: str, class_sets: ClassSets, documented: Mapping[str, Iterable[str]],
                 also_known: Mapping[str, str]) -> type[ProviderError] | None:
    """The class of a code the table holds; None for a code it does not."""
    for cls, codes in class_sets:
        if code in codes:
            return cls
    if code in also_known or any(code in codes for codes in documented.values()):
        return InvalidRequest
    return None
