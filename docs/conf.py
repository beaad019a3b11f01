"""Sphinx configuration of Cortex's documentation (``sphinx-build -W -b html docs OUT``).

The pages are MyST Markdown; the references (configuration, REST API, command line,
extras, plugins) are generated from the code at every build by ``_ext/cortex_reference``.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

import cortex  # noqa: E402

project = "Cortex"
author = "The Cortex authors"
copyright = "The Cortex authors; Apache-2.0"
release = version = cortex.__version__

extensions = ["myst_parser", "cortex_reference"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "simulator/*.md"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 4
html_theme = "alabaster"
html_title = f"Cortex {release}"
# a topic page may skip a heading level
suppress_warnings = ["myst.header"]


def setup(app):
    """Show Mermaid diagrams (docs/dependencies.md) as their text."""
    from pygments.lexers.special import TextLexer

    app.add_lexer("mermaid", TextLexer)
