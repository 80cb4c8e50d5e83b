"""Errors the lab reports to a person in one line."""


class LabError(RuntimeError):
    """A lab problem with a one-line, human-readable message."""


class NotRootError(LabError):
    """The lab needs root (namespaces, veth, nftables)."""


class MissingToolError(LabError):
    """A system tool the lab needs (ip, nft, tc, ...) is not installed."""
