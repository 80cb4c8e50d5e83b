"""The documentation the code cites is in the repository, and nothing points off it.

Code, specs and pages cite the project's own pages as ``docs/<page>.md §N``
(docs/README.md), and pages cite each other as ``[page.md](page.md) §N``: the
page must exist and have a heading numbered N. The reference notes the
project started from are not shipped, so a citation by their bare names
is a dangling one; so is any absolute
path of a developer's machine.

The README stays at most 300 lines, and its Layout table names every package
and subpackage of the tree, and no path that is gone. docs/lab/servers.md's
command lines still parse (their ``--help`` runs, and every flag they use is in
it), and docs/lab/experiments.md's spec still passes ``ptlab run --check``.
"""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
import sys
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


# --- a relative link with a section is a citation too ------------------------------------

#: ``[censor.md](censor.md) §5``, ``[../architecture.md](../architecture.md) §3.2–3.3``.
LINKED_SECTION = re.compile(
    rf"\]\(([^)#\s]+\.md)\)[ \t]*§[ \t]*({_NUMBER}(?:[ \t]*(?:[–-]|,|and)[ \t]*§?[ \t]*"
    rf"{_NUMBER}(?![\w.]))*)")


def linked_section_problems(page: Path, text: str) -> list[str]:
    """Sections named after a relative link that the linked page does not have."""
    where = str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name
    problems = []
    for m in LINKED_SECTION.finditer(text):
        if "://" in m.group(1):
            continue
        target = (page.parent / m.group(1)).resolve()
        if not target.is_file():
            continue  # test_links_between_pages_resolve reports it
        have = sections(target)
        for number in re.findall(_NUMBER, m.group(2)):
            if number not in have:
                problems.append(f"{where}: links to {m.group(1)} §{number}, "
                                "which has no such section")
    return problems


def test_linked_sections_exist():
    pages = [f for f in FILES if f.suffix == ".md"]
    problems = [p for page in pages for p in linked_section_problems(page, page.read_text())]
    assert not problems, "\n".join(problems)


def test_linked_section_check(tree: Path):
    page = tree / "docs" / "censors" / "README.md"
    ok = "see [fet.md](fet.md) §1.2 and [fet.md](fet.md) §1–2"
    bad = "see [fet.md](fet.md) §2.4, and [../censors/fet.md](../censors/fet.md) §1, §9"
    assert linked_section_problems(page, ok) == []
    found = linked_section_problems(page, bad)
    assert len(found) == 2 and "§2.4" in found[0] and "§9" in found[1]


# --- the experiment specs' comments cite pages too ----------------------------------------

SPECS = sorted((ROOT / "experiments").glob("*.toml"))


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_experiment_spec_citations(spec: Path):
    """A spec's comments say where its results and models are documented
    (``# docs/transports/webtunnel.md §7.3 has the results``)."""
    assert spec in FILES
    problems = citation_problems(spec.read_text(), str(spec.relative_to(ROOT)))
    assert not problems, "\n".join(problems)


def test_a_spec_comment_citing_a_missing_section_is_caught(tree: Path):
    text = '[experiment]\nname = "x"  # docs/censors/fet.md §2 has the rules\n' \
           "# docs/censors/fet.md §6 has the results\n"
    found = citation_problems(text, "experiments/x.toml", root=tree)
    assert len(found) == 1 and "§6" in found[0]


# --- the README stays short, and its Layout matches the tree ------------------------------

README_MAX_LINES = 300
#: The packages whose every subpackage the README's Layout must name.
PACKAGES = ("ptcommon", "transports", "broker", "censor_sim", "netns", "ptlab")
_CODE = re.compile(r"`([^`]+)`")
_DIR_NAME = re.compile(r"[\w.-]+(?:/[\w.-]+)*/")


def test_readme_is_at_most_300_lines():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; keep it to {README_MAX_LINES} and move detail "
        "to docs/ (docs/README.md indexes the pages)")


def layout_rows(readme: str) -> list[tuple[list[str], str]]:
    """The README's Layout table: for each row, the paths its first cell names and the
    text of its contents cell."""
    if "\n## Layout\n" not in readme:
        return []
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("|") or set(line) <= set("|- "):
            continue
        first, _, rest = line.strip().strip("|").partition("|")
        paths = _CODE.findall(first)
        if paths:  # the header row names no path
            rows.append((paths, rest))
    return rows


def packages_in(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """Every package and subpackage (a directory with ``__init__.py``), as ``a/b/``."""
    found = []
    for top in packages:
        if (root / top / "__init__.py").is_file():
            found += sorted(f"{p.parent.relative_to(root).as_posix()}/"
                            for p in (root / top).rglob("__init__.py")
                            if not SKIP_DIRS & set(p.relative_to(root).parts))
    return found


def layout_problems(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """A package missing from the README's Layout, or a Layout entry naming a path that
    does not exist.

    A row's first cell names paths from the root (`ptlab/common/`, `scripts/setup`). In its
    contents cell, a name in backticks that ends in ``/`` (`turbotunnel/`, `ml/`) is a
    directory inside the row's own directory. A package is in the Layout when either names
    it."""
    rows = layout_rows((root / "README.md").read_text())
    if not rows:
        return ["README.md has no Layout table (## Layout)"]
    problems, named = [], set()
    for paths, contents in rows:
        for path in paths:
            if not (root / path).exists():
                problems.append(f"Layout row {path!r}: no such path")
            named.add(path.rstrip("/") + "/" if (root / path).is_dir() else path)
        base = paths[0] if len(paths) == 1 and paths[0].endswith("/") else ""
        for name in _CODE.findall(contents):
            if not _DIR_NAME.fullmatch(name):
                continue
            if not (root / base / name).is_dir():
                problems.append(f"Layout row {paths[0]!r} names {name!r}: no such directory "
                                f"{base + name}")
            named.add(base + name)
    problems += [f"{pkg} is not in the README's Layout (give it a row, or name it as "
                 f"`{pkg.rstrip('/').rsplit('/', 1)[-1]}/` in its parent's row)"
                 for pkg in packages_in(root, packages) if pkg not in named]
    return problems


def test_readme_layout_matches_the_tree():
    problems = layout_problems()
    assert not problems, "\n".join(problems)


@pytest.fixture
def pkgtree(tmp_path: Path) -> Path:
    for pkg in ("ptlab", "ptlab/common", "ptlab/vm", "censor_sim", "censor_sim/bpf",
                "censor_sim/detectors", "censor_sim/detectors/ml"):
        (tmp_path / pkg).mkdir(parents=True)
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "ptlab" / "static").mkdir()  # no __init__.py: not a package
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "setup").write_text("")
    return tmp_path


def _layout(rows: str) -> str:
    return f"# x\n\n## Layout\n\n| path | contents |\n| --- | --- |\n{rows}\n## Next\n"


GOOD_ROWS = (
    "| `ptlab/` | the application; `vm/` (three machines) |\n"
    "| `ptlab/common/` | the floor |\n"
    "| `censor_sim/` | the censor; `bpf/` (the kernel fast path) |\n"
    "| `censor_sim/detectors/` | detectors; `ml/` (learning) |\n"
    "| `scripts/setup` | setup |\n")


@pytest.mark.parametrize(("rows", "expect"), [
    (GOOD_ROWS, []),
    (GOOD_ROWS.replace("; `bpf/` (the kernel fast path)", ""), ["censor_sim/bpf/ is not"]),
    (GOOD_ROWS.replace("| `ptlab/common/` | the floor |\n", ""), ["ptlab/common/ is not"]),
    (GOOD_ROWS.replace("; `ml/` (learning)", ", ml"), ["censor_sim/detectors/ml/ is not"]),
    (GOOD_ROWS + "| `ptlab/gone/` | a room since moved |\n", ["'ptlab/gone/': no such path"]),
    (GOOD_ROWS + "| `Vagrantfile`, `scripts/setup` | VMs |\n", ["'Vagrantfile': no such path"]),
    (GOOD_ROWS.replace("`vm/`", "`vm/`, `old/`"), ["names 'old/': no such directory"]),
])
def test_layout_check(pkgtree: Path, rows: str, expect: list[str]):
    (pkgtree / "README.md").write_text(_layout(rows))
    found = layout_problems(pkgtree, ("ptlab", "censor_sim", "netns"))
    assert len(found) == len(expect), found
    for problem, words in zip(found, expect, strict=True):
        assert words in problem


def test_layout_check_needs_the_table(pkgtree: Path):
    (pkgtree / "README.md").write_text("# x\n\nNo layout here.\n")
    assert layout_problems(pkgtree, ("ptlab",)) == ["README.md has no Layout table (## Layout)"]


# --- docs/lab/servers.md: every command line there still parses --------------------------

SERVERS_PAGE = ROOT / "docs" / "lab" / "servers.md"
_SH_BLOCK = re.compile(r"```sh\n(.*?)```", re.S)
_ASSIGNMENT = re.compile(r"[A-Z_][A-Z0-9_]*=\S*")


def page_commands(text: str) -> list[list[str]]:
    """The ``python -m ...`` and ``ptlab ...`` command lines of a page's ``sh`` blocks,
    continuation lines joined, environment assignments and comments dropped."""
    commands = []
    for block in _SH_BLOCK.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while words and _ASSIGNMENT.fullmatch(words[0]):
                words.pop(0)
            if words[:2] == ["python", "-m"] and len(words) > 2 or words[:1] == ["ptlab"]:
                commands.append(words)
    return commands


def program(words: list[str]) -> tuple[str, ...]:
    """What a command runs: the module or ``ptlab`` command, and a subcommand if any
    (``('transports.lab_mode', 'server')``, ``('ptlab', 'censor')``)."""
    head = words[2:] if words[0] == "python" else words
    if head[0] == "ptlab" or (len(head) > 1 and re.fullmatch(r"[a-z][a-z-]*", head[1])):
        return tuple(head[:2])
    return tuple(head[:1])


def argv(words: list[str]) -> list[str]:
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    return [sys.executable, "-m", "ptlab", *words[1:]]


SERVER_COMMANDS = [list(w) for w in dict.fromkeys(
    tuple(w) for w in page_commands(SERVERS_PAGE.read_text()))]
HELP_LINES = [w for w in SERVER_COMMANDS if w[-1] == "--help"]


@functools.cache
def help_text(words: tuple[str, ...]) -> tuple[int, str]:
    done = subprocess.run(argv(list(words)), cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("words", HELP_LINES, ids=[" ".join(w) for w in HELP_LINES])
def test_servers_page_help_lines_run(words: list[str]):
    code, text = help_text(tuple(words))
    assert code == 0, f"{' '.join(words)} exited {code}:\n{text}"
    assert "usage:" in text


@pytest.mark.parametrize("words", SERVER_COMMANDS, ids=[" ".join(w) for w in SERVER_COMMANDS])
def test_servers_page_commands_use_only_their_flags(words: list[str]):
    """Each command on the page has a ``--help`` line there too, and every flag it
    uses is one its help lists."""
    helps = [h for h in HELP_LINES if program(h) == program(words)]
    assert helps, f"{' '.join(words)}: add `{' '.join(program(words))} --help` to the page"
    code, text = help_text(tuple(helps[0]))
    assert code == 0
    rest = words[len(program(words)) + (2 if words[0] == "python" else 0):]
    flags = [w.split("=", 1)[0] for w in rest if re.fullmatch(r"--?[a-z][\w-]*(=.*)?", w)]
    unknown = [f for f in flags if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", text)]
    assert not unknown, f"{' '.join(words)}: {unknown} not in its --help"


def test_servers_page_reader():
    text = ("```sh\npython -m broker --help\nFOO=1 BAR='a\\:b' \\\npython -m transports.pt"
            "\nptlab censor --profile x  # a comment\nls -l\n```\n`python -m inline` is prose\n")
    assert page_commands(text) == [["python", "-m", "broker", "--help"],
                                   ["python", "-m", "transports.pt"],
                                   ["ptlab", "censor", "--profile", "x"]]
    assert program(["python", "-m", "transports.lab_mode", "server", "--listen", "x"]) == \
        ("transports.lab_mode", "server")
    assert program(["python", "-m", "broker", "--addr", "x"]) == ("broker",)
    assert program(["ptlab", "snowflake-proxy", "-broker", "x"]) == ("ptlab", "snowflake-proxy")


def test_servers_page_covers_every_server():
    """The servers the brief of the page lists, each with its command."""
    runs = {program(w) for w in SERVER_COMMANDS}
    for expected in [("transports.lab_mode", "server"), ("transports.obfs4", "server"),
                     ("transports.meek.server",), ("transports.snowflake.server",),
                     ("broker",), ("transports.snowflake.natprobe",),
                     ("ptlab", "snowflake-proxy"), ("transports.conjure.station",),
                     ("transports.pt",), ("ptlab", "pt"), ("ptlab", "censor"),
                     ("censor_sim",), ("censor_sim.prober", "serve")]:
        assert expected in runs, f"docs/lab/servers.md has no {' '.join(expected)}"


# --- docs/lab/experiments.md: its spec is a valid spec ------------------------------------

def test_experiments_page_spec_passes_check(tmp_path: Path):
    text = (ROOT / "docs" / "lab" / "experiments.md").read_text()
    spec = re.search(r"## 1\. A spec\n.*?```toml\n(.*?)```", text, re.S)
    assert spec, "docs/lab/experiments.md lost its example spec"
    path = tmp_path / "mine.toml"
    path.write_text(spec.group(1))
    done = subprocess.run([sys.executable, "-m", "ptlab", "run", "--check", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


# --- docs/censors: every test a page names for a stated behaviour exists -------------------

def test_every_test_a_censor_page_names_exists():
    """The censor pages map each behaviour a source states to the test that checks it
    (issue 46); a renamed or deleted test would leave the page promising one."""
    defined = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        defined |= set(re.findall(r"^(?:async )?def (test_\w+)", path.read_text(), re.M))
    missing = []
    for page in [*(ROOT / "docs" / "censors").glob("*.md"), ROOT / "docs/lab/censor.md"]:
        for name in set(re.findall(r"`(test_\w+)`", page.read_text())):
            if name not in defined:
                missing.append(f"{page.relative_to(ROOT)}: {name}")
    assert not missing, missing
