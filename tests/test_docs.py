"""The documentation's Python examples run as written, and its relative links
lead to files that exist.  (tools/test also builds the pages with Sphinx,
warnings as errors, which checks links between pages and their anchors.)"""

import re
from pathlib import Path

import pytest

from test_readme import local_links

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = sorted(DOCS.glob("*.md"))
EXAMPLES = [
    pytest.param(page, source, id=f"{page.stem}-block{i}")
    for page in PAGES
    for i, source in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.S))
]
LINKS = [
    pytest.param(page, target, id=f"{page.stem}-{target}")
    for page in PAGES
    for target in local_links(page.read_text())
]


def test_the_docs_have_pages_and_examples():
    assert len(PAGES) >= 9 and len(EXAMPLES) >= 8


@pytest.mark.parametrize(("page", "source"), EXAMPLES)
def test_docs_example_runs(page, source, tmp_path, monkeypatch):
    # numpy is optional (everything else works without it): its examples
    # run where it is installed.
    if re.search(r"^\s*(import|from) numpy\b", source, re.M):
        pytest.importorskip("numpy")
    # As test_readme: in a folder of its own, so that a checkout's source
    # folder cannot shadow the installed package.
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "docs_example"}
    exec(compile(source, str(page), "exec"), namespace)


@pytest.mark.parametrize(("page", "target"), LINKS)
def test_docs_link_points_at_a_file_that_exists(page, target):
    assert (page.parent / target).exists(), f"{page.name} links to {target}, which is missing"


ROOT = DOCS.parent
CITING = PAGES + [ROOT / "README.md", ROOT / "ARCHITECTURE.md"]
CITED_TESTS = sorted({
    (page.name, path, name)
    for page in CITING
    for path, name in re.findall(r"(tests/[\w/]+\.py)(?:::(\w+))?", page.read_text())
})


@pytest.mark.parametrize(("page", "path", "name"), CITED_TESTS,
                         ids=[f"{p}-{t}{'::' + n if n else ''}" for p, t, n in CITED_TESTS])
def test_docs_cite_test_files_and_tests_that_exist(page, path, name):
    """A page that names a test file (or file::test) names one that exists:
    tests move between files (issue 18), citations must follow."""
    assert (ROOT / path).is_file(), f"{page} cites {path}, which is missing"
    if name:
        assert re.search(rf"^\s*(async )?def {name}\(", (ROOT / path).read_text(), re.M), (
            f"{page} cites {path}::{name}, which is not defined there")
