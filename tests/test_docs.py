"""The documentation the code cites is in the repository, and nothing points off it.

Code cites the project's own pages as ``docs/<page>.md §N`` (docs/README.md):
the page must exist and have a heading numbered N. The reference notes the
project started from are not shipped, so a citation by their bare names
is a dangling one; so is any absolute
path of a developer's machine.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".git", ".venv", "results", "__pycache__", ".vagrant", "node_modules",
             ".hypothesis", ".pytest_cache"}

_NUMBER = r"\d+(?:\.\d+)*"
#: ``docs/x.md``, optionally with sections: ``§2``, ``§2.1–2.3``, ``§3.1, §3.2``, ``§3 and §4``.
CITATION = re.compile(
    rf"docs/((?:[\w-]+/)*[\w-]+\.md)"
    rf"(?:[ \t]*§[ \t]*({_NUMBER}(?:[ \t]*(?:[–-]|,|and)[ \t]*§?[ \t]*{_NUMBER}(?![\w.]))*))?")
HEADING = re.compile(r"^#{1,6}[ \t]+(\d+(?:\.\d+)*)\.?[ \t]", re.M)
#: The names of the notes outside the repository that code once cited, and the
#: machine directories no committed file may name: written in parts, so that this
#: file, which the checks read too, names none of them itself.
_OLD_NOTES = ("censors", "snowflake", "obfs4", "meek_conjure", "kcp", "ARCHI" + "TECTURE",
              "eco" + "system", "field" + "-2026", "v" + "ms")
_MACHINE_DIRS = ("wo" + "rk", "ro" + "ot", "ho" + "me", "Us" + "ers")
OFF_TREE_NOTE = re.compile(r"(?<![\w/.-])(?:" + "|".join(_OLD_NOTES) + r")\.md\b")
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:" + "|".join(_MACHINE_DIRS) + r")/[\w.-]"
                          + r"|\.\./" + "sha" + r"red\b")
MD_LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")


def _tree(root: Path) -> list[Path]:
    """The files git would commit (tracked, or untracked and not ignored): caches
    such as .hypothesis/ hold this machine's paths and are nobody's citations."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):  # not a checkout: walk it
        return [p for p in sorted(root.rglob("*"))
                if not SKIP_DIRS & set(p.relative_to(root).parts)]
    return sorted({root / name for name in out.decode().split("\0") if name})


def text_files(root: Path = ROOT) -> list[Path]:
    """Every text file of the tree (not the venv, results, caches or git's own files)."""
    out = []
    for path in _tree(root):
        if not path.is_file() or SKIP_DIRS & set(path.relative_to(root).parts):
            continue
        if path.suffix in {".pcap", ".png", ".gz", ".pyc", ".sqlite", ".bin", ".der"}:
            continue
        try:
            path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        out.append(path)
    return out


def sections(page: Path) -> set[str]:
    return set(HEADING.findall(page.read_text()))


def citation_problems(text: str, where: str, root: Path = ROOT) -> list[str]:
    """Citations in ``text`` to a docs page or section that does not exist."""
    problems = []
    for m in CITATION.finditer(text):
        page = root / "docs" / m.group(1)
        if not page.is_file():
            problems.append(f"{where}: cites docs/{m.group(1)}, which does not exist")
            continue
        have = sections(page)
        for number in re.findall(_NUMBER, m.group(2) or ""):
            if number not in have:
                problems.append(f"{where}: cites docs/{m.group(1)} §{number}, "
                                "which has no such section")
    return problems


def off_tree_problems(text: str, where: str, in_docs: bool) -> list[str]:
    """Machine paths anywhere; the old notes' bare names outside docs/ (where a
    relative link to a bare page name is a page of our own)."""
    problems = [f"{where}: absolute machine path {m.group(0)!r}"
                for m in MACHINE_PATH.finditer(text)]
    if not in_docs:
        problems += [f"{where}: cites {m.group(0)}, a note outside the repository"
                     for m in OFF_TREE_NOTE.finditer(text)]
    return problems


def link_problems(page: Path) -> list[str]:
    """Relative markdown links from ``page`` to .md files that do not exist."""
    return [f"{page.relative_to(ROOT)}: links to {target}, which does not exist"
            for target in MD_LINK.findall(page.read_text())
            if "://" not in target and not (page.parent / target).resolve().is_file()]


FILES = text_files()
THIS = Path(__file__).resolve()


def test_every_citation_names_an_existing_page_and_section():
    # This file's own examples cite a synthetic tree (the fixture below).
    problems = [p for f in FILES if f != THIS
                for p in citation_problems(f.read_text(), str(f.relative_to(ROOT)))]
    assert not problems, "\n".join(problems)


def test_nothing_points_outside_the_repository():
    problems = [p for f in FILES
                for p in off_tree_problems(f.read_text(), str(f.relative_to(ROOT)),
                                           f.is_relative_to(ROOT / "docs"))]
    assert not problems, "\n".join(problems)


def test_links_between_pages_resolve():
    pages = [f for f in FILES if f.suffix == ".md"]
    assert ROOT / "README.md" in pages and ROOT / "docs" / "README.md" in pages
    problems = [p for page in pages for p in link_problems(page)]
    assert not problems, "\n".join(problems)


def test_every_docs_page_is_cited_or_linked():
    """A page nobody reaches is either stale or missing from the index."""
    corpus = "\n".join(f.read_text() for f in FILES)
    unreached = [p for p in sorted((ROOT / "docs").rglob("*.md"))
                 if p.name != "README.md" and p.name not in corpus]
    assert not unreached, unreached


# --- the checks themselves fail when they should --------------------------------------

@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "docs" / "censors").mkdir(parents=True)
    (tmp_path / "docs" / "censors" / "fet.md").write_text(
        "# FET\n\n## 1. Rules\n\n### 1.2 Exemptions\n\n## 2. Numbers\n")
    return tmp_path


@pytest.mark.parametrize(("text", "expect"), [
    ("see docs/censors/fet.md §1.2", []),
    ("see docs/censors/fet.md §1–2", []),
    ("see docs/censors/fet.md", []),
    ("see docs/censors/fet.md §3", ["no such section"]),
    ("see docs/censors/fet.md §1.2–2.4", ["no such section"]),
    ("see docs/censors/fet.md §1.2, §2", []),
    ("see docs/censors/fet.md §1.2, §2.7", ["§2.7"]),
    ("see docs/censors/fet.md §1 and §3", ["§3"]),
    ("docs/censors/fet.md §2. Then 4.5 Mbit/s", []),
    ("see docs/censors/gone.md §1", ["does not exist"]),
])
def test_citation_check(tree: Path, text: str, expect: list[str]):
    found = citation_problems(text, "x.py", root=tree)
    assert len(found) == len(expect)
    for problem, words in zip(found, expect, strict=True):
        assert words in problem


# The checker's bad examples, built from parts so that this file itself carries
# no off-tree citation or machine path.
OLD_NOTE, OLD_PAGE = "censors" + ".md", "snowflake" + ".md"
WORK, SHARED, ROOT_DIR, HOME = "/" + "wo" + "rk", ".." + "/sha" + "red", "/" + "ro" + "ot/", \
    "/" + "ho" + "me/"
REFS = "sha" + "red/" + "proto" + "cols"


@pytest.mark.parametrize(("text", "in_docs", "bad"), [
    (f"({OLD_NOTE} §2.1)", False, True),
    (f"({OLD_PAGE} §3)", True, False),  # a relative page name inside docs/
    (f"docs/transports/{OLD_PAGE} §3", False, False),
    (f"``{WORK}/{REFS}/{OLD_NOTE}``", False, True),
    (f"``{WORK}/{REFS}/{OLD_NOTE}``", True, True),
    (f"recipe: {SHARED}/proto" + "cols/x", False, True),
    (f"a key in {ROOT_DIR}.ssh", False, True),
    (f"{HOME}alice/ptlab", False, True),
    ("/run/ptlab and /tmp/x", False, False),
])
def test_off_tree_check(text: str, in_docs: bool, bad: bool):
    assert bool(off_tree_problems(text, "x", in_docs)) is bad
