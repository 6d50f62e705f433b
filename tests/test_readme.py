"""The README's Python examples run as written, and its links lead to files
that exist (on a code host and in the sdist, both read it beside them)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TEXT = README.read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", TEXT, re.S)
# [text](target) outside code: the target up to a space or ")".
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)[^)]*\)")


def local_links(text):
    """The relative link targets of a Markdown text, without #anchors."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return [t.split("#")[0] for t in LINK.findall(text)
            if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_readme_has_a_python_example():
    assert len(BLOCKS) >= 1


@pytest.mark.parametrize("source", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_example_runs(source, tmp_path, monkeypatch):
    # In a folder of its own, as a user's script would run: a checkout's
    # seqlock_py/ source folder (no compiled extension) must not shadow
    # the installed package for the processes an example starts.
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "readme_example"}
    exec(compile(source, str(README), "exec"), namespace)


def test_readme_links_to_every_docs_page_and_architecture():
    targets = set(local_links(TEXT))
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md") if p.name != "index.md"}
    assert pages <= targets, pages - targets
    assert "ARCHITECTURE.md" in targets


@pytest.mark.parametrize("target", local_links(TEXT))
def test_readme_link_points_at_a_file_that_exists(target):
    assert (ROOT / target).exists(), f"README.md links to {target}, which is missing"
