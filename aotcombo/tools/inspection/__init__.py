"""``aotcombo inspect``: what a built package holds, without installing or loading it.

    aotcombo inspect dist/mymodel-0.1.0-py3-none-any.whl     # a wheel (read with zipfile)
    aotcombo inspect mymodel                                 # an installed package (found, not imported)
    aotcombo inspect path/to/unpacked/                       # a folder holding <name>/manifest.json

Reports archs, inputs, weights, versions, the launches per forward against the
un-combined count, and per arch every combo kernel: its dependency level, the
Inductor kernels it launches together with their block sizes, its grid, warps,
registers, local and shared memory. ``--json`` prints the same as JSON;
``--png FILE`` draws the combo partition of one arch (one row per dependency
level, one box per launch, the sub-kernels inside) with matplotlib, the optional
extra ``aotcombo[png]``, imported by ``render_png`` only. Imports neither torch nor
triton.

One module per job:

- ``source``: finding the package (a wheel, an installed package, a folder) and reading its files;
- ``contents``: what it holds, as plain data (``inspect_package``; ``--json`` prints it);
- ``text``: the text report (``format_text``);
- ``png``: the partition drawn with matplotlib (``render_png``).
"""

from .contents import inspect_package
from .png import render_png
from .source import locate
from .text import format_text

__all__ = ["format_text", "inspect_package", "locate", "render_png"]
