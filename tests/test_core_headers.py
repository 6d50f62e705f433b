"""Every header of the C11 core compiles on its own, as strict C11 with the
core's folder as its only include path: a header includes what it uses,
so no file that includes it first (a new core file, a test, a user's
program) has to know what else to include or define before it.
(tools/check-core compiles each core .c alone; this is the same for the
headers, which no .c can check: each .c defines _GNU_SOURCE first.)"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The core's folder (before issue 18 the core's two headers sat in src/).
CORE = ROOT / "src" / "libseqlock"
HEADERS = (sorted(CORE.glob("*.h")) if CORE.is_dir()
           else [ROOT / "src" / "seqlock.h", ROOT / "src" / "record.h"])
CC = shutil.which("cc") or shutil.which("gcc")

pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler")


@pytest.mark.parametrize("header", HEADERS, ids=[h.name for h in HEADERS])
def test_core_header_compiles_on_its_own_as_strict_c11(header):
    proc = subprocess.run(
        [CC, "-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
         f"-I{header.parent}", "-x", "c", str(header)],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, (
        f"{header.relative_to(ROOT)} does not compile on its own:\n{proc.stderr[-3000:]}"
    )
