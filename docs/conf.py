"""Sphinx configuration for the vecpool docs (MyST Markdown, furo theme)."""

from __future__ import annotations

import os
from importlib import metadata

project = "vecpool"
author = "vecpool developers"
copyright = "vecpool developers"
try:
    release = metadata.version("vecpool")
except metadata.PackageNotFoundError:  # a checkout that is not installed
    release = "unknown"
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence"]

# Google-style docstrings, as enforced by ruff's pydocstyle rules.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_member_order = "bysource"
autodoc_typehints = "signature"

html_theme = "furo"
html_title = f"vecpool {release}"

# Intersphinx downloads inventories, and the build machines are offline, so it is
# opt-in: VECPOOL_DOCS_INTERSPHINX=1 sphinx-build ...  Offline, references into
# other projects are left unlinked instead of failing the `-n -W` build.
USE_INTERSPHINX = os.environ.get("VECPOOL_DOCS_INTERSPHINX") == "1"
intersphinx_mapping: dict[str, tuple[str, str | None]] = (
    {
        "python": ("https://docs.python.org/3", None),
        "numpy": ("https://numpy.org/doc/stable/", None),
        "gymnasium": ("https://gymnasium.farama.org/", None),
    }
    if USE_INTERSPHINX
    else {}
)

nitpicky = True
# Names that no inventory documents under the path the annotations use.
nitpick_ignore_regex = [
    ("py:.*", r"(numpy\.typing|npt)\..*"),
    ("py:.*", r".*\._[a-z_]+\..*"),  # private modules of any package
]
if not USE_INTERSPHINX:
    # every reference outside vecpool stays unlinked (builtins never warn)
    nitpick_ignore_regex.append(("py:.*", r"(?!vecpool\b).*"))
