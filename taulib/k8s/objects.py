"""Reading the fields of Kubernetes objects as the API server returns them: metadata, status, conditions, owners.

Reads one object (a dict, as `taulib.k8s.api` returns it, or None) and returns plain values: a missing or malformed
field is an empty dict, an empty list, None or 0, never an exception. The status rules in `jobs`, `kueue`, `pods` and
`phases` read objects only through these. No I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from taulib.jsonio import Record


def meta(obj: Record | None) -> Record:
    """The object's metadata."""
    return (obj or {}).get("metadata") or {}


def status_of(obj: Record | None) -> Record:
    """The object's status."""
    return (obj or {}).get("status") or {}


def conditions(obj: Record | None) -> list[Record]:
    """The object's status conditions, in the order given."""
    return [c for c in status_of(obj).get("conditions") or [] if isinstance(c, dict)]


def condition(obj: Record | None, kind: str) -> Record | None:
    """The condition of type `kind` when its status is True, else None."""
    for cond in conditions(obj):
        if cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None


def explain(cond: Record | None, default: str) -> str:
    """"Reason: message" of a condition."""
    if not cond:
        return default
    parts = [p for p in (cond.get("reason"), cond.get("message")) if p]
    return ": ".join(parts) if parts else default


def reported_conditions(obj: Record | None) -> list[Record]:
    """The conditions as a snapshot reports them: the five fields, empty ones None, sorted by type."""
    out = [{"type": c.get("type"), "status": c.get("status"), "reason": c.get("reason") or None,
            "message": c.get("message") or None, "lastTransitionTime": c.get("lastTransitionTime") or None}
           for c in conditions(obj) if isinstance(c.get("type"), str)]
    return sorted(out, key=lambda c: c["type"])


def controller_ref(obj: Record) -> Record | None:
    """The ownerReference marked controller, else the first one, else None."""
    refs = [r for r in meta(obj).get("ownerReferences") or [] if isinstance(r, dict)]
    for ref in refs:
        if ref.get("controller"):
            return ref
    return refs[0] if refs else None


def owned_by(obj: Record | None, owner: Record | None) -> bool:
    """Whether one of obj's ownerReferences is `owner`, by uid (names can be reused; uids cannot)."""
    uid = meta(owner).get("uid")
    return bool(uid) and any(isinstance(r, dict) and r.get("uid") == uid
                             for r in meta(obj).get("ownerReferences") or [])


def count(value: object) -> int:
    """A count field: the int itself, 0 for anything else (a bool included)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
