"""A stand-in for a Go tool's binary: answers ``version`` with the lines sing-box
prints (version, tags, revision), so tests can point a spec at a build with
chosen tags."""

from __future__ import annotations

from pathlib import Path


def fake_tool(tmp_path: Path, name: str, tags: str | None = "with_quic,with_gvisor",
              revision: str = "0123abcd") -> Path:
    """A script that answers ``version`` as sing-box does (and nothing else)."""
    lines = [f"{name} version 9.9.9", "", "Environment: go1.0 linux/amd64"]
    if tags is not None:
        lines.append(f"Tags: {tags}")
    lines.append(f"Revision: {revision}")
    body = "\\n".join(lines)
    path = tmp_path / name
    path.write_text(f'#!/bin/sh\n[ "$1" = version ] || exit 1\nprintf "{body}\\n"\n')
    path.chmod(0o755)
    return path
