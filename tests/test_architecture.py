"""ARCHITECTURE.md is the map of the tree, checked so that it cannot go
stale: every file of the mapped folders is on the map, and every entry on
the map names a file that exists.  (That the core holds no Python is
tools/check-core's check.)"""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "ARCHITECTURE.md"
#: Folders whose every file is on the map (what is built or generated in
#: them is not: compiled objects, caches, the C tests' binaries).
MAPPED = ["src/libseqlock", "src/_seqlock", "seqlock_py", "tools",
          "benchmarks", "tests/c", "tests", "examples"]
GENERATED = ["*.so", "*.pyc", "*.o"]

pytestmark = pytest.mark.skipif(not MAP.exists(), reason="no ARCHITECTURE.md here")


def map_entries() -> list[str]:
    """The first word of each line of the map's tree block."""
    text = MAP.read_text()
    block = text.split("## The tree", 1)[1].split("```", 2)[1]
    return [line.split()[0] for line in block.splitlines()
            if line and not line[0].isspace()]


def files_in_mapped_folders() -> list[str]:
    found = []
    for folder in MAPPED:
        for path in sorted((ROOT / folder).iterdir()):
            name = path.name
            if path.is_file() and not any(fnmatch.fnmatch(name, g) for g in GENERATED):
                found.append(f"{folder}/{name}")
    return found


def test_every_file_of_the_mapped_folders_is_on_the_map():
    entries = map_entries()
    missing = [f for f in files_in_mapped_folders()
               if not any(fnmatch.fnmatch(f, e) for e in entries)]
    assert not missing, f"add to ARCHITECTURE.md's tree: {missing}"


def test_every_entry_on_the_map_names_a_file_that_exists():
    stale = [e for e in map_entries()
             if not any(fnmatch.fnmatch(str(p.relative_to(ROOT)), e)
                        for p in ROOT.glob(e))]
    assert not stale, f"ARCHITECTURE.md names what is not there: {stale}"

