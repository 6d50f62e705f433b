"""Sphinx configuration for seqlock_py's documentation.

Build (after ``pip install '.[docs]'``), warnings as errors:

    python -P -m sphinx -W --keep-going -b html docs build/docs

The pages are MyST Markdown, readable as they stand on a code host; the
API reference comes from the installed package's type stubs (signatures,
types) and docstrings (text), by docs/_ext/stub_api.py.
"""

import os
import sys
from pathlib import Path

from sphinx import addnodes
from sphinx.transforms import SphinxTransform

ROOT = Path(__file__).resolve().parent.parent

# Document the installed build: a checkout's seqlock_py/ source folder has
# no compiled extension, so drop the repository root from sys.path unless
# an in-place build sits there (as tests/conftest.py does).
if not any((ROOT / "seqlock_py").glob("_seqlock*.so")):
    sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != ROOT]

import seqlock_py  # noqa: E402

project = "seqlock_py"
author = "The seqlock_py developers"
copyright = "the seqlock_py developers"
release = version = seqlock_py.__version__

# The API reference: signatures and types from the stubs (docs/_ext).
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
extensions = ["stub_api", "myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Links such as threads.md#the-seqlock-api work here and on a code host.
myst_heading_anchors = 3

# A signature longer than this is set one parameter a line, so that the
# typed signatures of the API reference are never cut at the page's edge.
python_maximum_signature_line_length = 72

html_theme = "alabaster"
# Wide enough for the examples' longest lines; wider code scrolls in its box.
html_theme_options = {"page_width": "1100px", "sidebar_width": "220px"}
html_title = "seqlock_py"
html_show_sourcelink = False


class FilesOutsideDocsAsDownloads(SphinxTransform):
    """A link from a page to a Markdown file outside docs/ (../ARCHITECTURE.md,
    a benchmark table): on a code host it opens the file; here it would
    name a document that is not in the project, so make it a download of
    that file instead, as MyST does for files of other kinds (.json, .c)."""

    default_priority = 500

    def apply(self, **kwargs):
        for ref in list(self.document.findall(addnodes.pending_xref)):
            target = ref.get("reftarget", "")
            if (ref.get("refdomain") != "doc" or ref.get("reftype") != "myst"
                    or target in self.env.found_docs
                    or not os.path.isabs(target)):
                continue
            path = Path(target + ".md")
            if not path.is_file():
                continue
            here = Path(self.env.doc2path(self.env.docname)).parent
            download = addnodes.download_reference(
                refdomain=None, reftype="myst", refexplicit=ref.get("refexplicit"),
                refdoc=self.env.docname,
                reftarget=os.path.relpath(path, here))
            download.source, download.line = ref.source, ref.line
            download.extend(ref.children)
            ref.replace_self(download)


def setup(app):
    app.add_transform(FilesOutsideDocsAsDownloads)
