"""A C file's comments that name another C file name one that exists: code
moves between files (issue 18 split seqlock.c into the core's files, and
binding.h into the binding's headers), and "as seqlock.c finds it" must
follow it, as test_docs.py makes the pages' citations of tests follow."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CITING = sorted(
    p for pattern in ("src/**/*.c", "src/**/*.h", "tests/c/*.c", "tests/c/*.h")
    for p in ROOT.glob(pattern)
)
#: Names a comment may use for a file that is not the project's: the
#: user's program in a build line, CPython's headers.
NOT_OURS = {"prog.c", "Python.h", "structmember.h"}
OURS = {p.name for p in ROOT.rglob("*.[ch]")}


def cited_files(path: Path) -> list[str]:
    """The *.c / *.h names in path's text outside #include lines (a system
    header is not a citation)."""
    text = "\n".join(line for line in path.read_text().splitlines()
                     if not re.match(r"\s*#\s*include", line))
    return sorted(set(re.findall(r"(?<![\w/.])(\w+\.[ch])\b", text)))


CITATIONS = [
    pytest.param(path, name, id=f"{path.relative_to(ROOT)}-{name}")
    for path in CITING
    for name in cited_files(path)
    if name not in NOT_OURS
]


@pytest.mark.parametrize(("path", "name"), CITATIONS)
def test_a_c_file_names_only_c_files_that_exist(path, name):
    assert name in OURS, f"{path.relative_to(ROOT)} names {name}, which is not in the tree"
