"""Lab naming (docs/architecture.md §5.1): every lab object starts with ``ptl``.

A lab has a short id (1-4 characters of ``[a-z0-9]``). Namespaces are named
``ptl<id>-<role>``; interfaces are ``ptl<id><code>`` where ``code`` is the short
code of the node at the other end of the link, so they stay within the
kernel's 15 characters even with hundreds of proxies (``ptlabcdp999`` is 11).
"""

from __future__ import annotations

import re
import secrets
import string

from .errors import LabError

PREFIX = "ptl"
IFNAMSIZ = 15
_ID_RE = re.compile(r"^[a-z0-9]{1,4}$")
_ROLE_RE = re.compile(r"^[a-z][a-z0-9]{0,15}$")


def new_lab_id() -> str:
    """A random 4-character lab id."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(4))


def check_lab_id(lab_id: str) -> str:
    """Validate a lab id, raising LabError with the rule it broke."""
    if not _ID_RE.match(lab_id):
        raise LabError(f"bad lab id {lab_id!r}: 1-4 characters of a-z and 0-9")
    return lab_id


def check_role(role: str) -> str:
    """Validate a node role name (it becomes part of a namespace name)."""
    if not _ROLE_RE.match(role):
        raise LabError(f"bad role name {role!r}: a-z then up to 15 of a-z0-9")
    return role


def ns_name(lab_id: str, role: str) -> str:
    """The namespace of `role` in lab `lab_id`."""
    return f"{PREFIX}{lab_id}-{role}"


def if_name(lab_id: str, peer_code: str) -> str:
    """The interface that faces the node whose code is `peer_code`."""
    name = f"{PREFIX}{lab_id}{peer_code}"
    if len(name) > IFNAMSIZ:
        raise LabError(f"interface name {name!r} is longer than {IFNAMSIZ} characters")
    return name


def lab_id_of_ns(name: str) -> str | None:
    """The lab id a namespace name belongs to, or None if it is not a lab's."""
    m = re.match(rf"^{PREFIX}([a-z0-9]{{1,4}})-[a-z][a-z0-9]*$", name)
    return m.group(1) if m else None
