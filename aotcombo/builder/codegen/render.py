"""The Jinja templates (``templates/``) every generated source is rendered from."""

from __future__ import annotations

import functools
from pathlib import Path

import jinja2


def templates_dir() -> Path:
    """Installed, the templates ship inside the package (``aotcombo/templates``);
    in a source checkout they are the top-level ``templates/`` folder."""
    package = Path(__file__).resolve().parents[2]
    installed = package / "templates"
    return installed if (installed / "combo_kernel.py.j2").is_file() else package.parent / "templates"


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render(template: str, **context) -> str:
    return _environment().get_template(template).render(**context)
