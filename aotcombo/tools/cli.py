"""The ``aotcombo`` command line: ``build``, ``inspect``, ``cache``."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback

from .. import __version__
from ..builder.options import DEFAULT_ARCHS
from ..errors import EXIT_STATUSES, INTERNAL_ERROR, INTERRUPTED, BuildError
from .commands import COMMANDS

EPILOG = "exit status: " + "; ".join(f"{code} {what}" for code, what in EXIT_STATUSES) + """.

examples:
  aotcombo build sample_models/branches.py
  aotcombo build model.py --arch sm_80,sm_90 --name mymodel --out dist/
  aotcombo inspect dist/mymodel-0.1.0-py3-none-any.whl --png partition.png
  pip install dist/mymodel-*.whl && python -c "import mymodel; m = mymodel.load('cuda')"
"""

CACHE_HELP = """\
build cache: compiled kernels and traces are kept in $AOTCOMBO_CACHE_DIR, else
$XDG_CACHE_HOME/aotcombo, else ~/.cache/aotcombo, so an unchanged model rebuilds in
seconds; --no-cache (or AOTCOMBO_NO_CACHE=1) builds from scratch without reading or
writing it. The same model, inputs, archs and tool versions give a byte-identical
wheel, cached or not.

C extensions: the wheel carries the runtime's kernel launcher and input guard
compiled from C ($CC, else cc, and this Python's headers; without them, a warning
and a wheel of Python files); the installed package uses them where they load
(CPython >= 3.10 on this platform), ctypes and torch's TensorGuards elsewhere. The
C compiler counts among the tool versions above; --no-native (or AOTCOMBO_NATIVE=0)
leaves them out.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aotcombo",
        description="Ahead-of-time kernel packager for PyTorch: trace a model through TorchInductor "
        "on a machine without a GPU, fuse independent kernels into combo kernels, compile them to "
        "cubins for each GPU arch, and ship it all as one wheel whose runtime needs only torch and "
        "the CUDA driver.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"aotcombo {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    build = commands.add_parser(
        "build",
        help="build a wheel from a model file",
        description="Build an installable wheel from MODEL_FILE, a Python file defining get_model() "
        "(an nn.Module on the CPU) and get_example_inputs() (a tuple of CPU tensors). The package "
        "runs the model for exactly those input shapes, dtypes and strides, or for several batch sizes "
        "(--batch, --dynamic).",
        epilog=CACHE_HELP + "\n" + EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    build.add_argument("model_file", metavar="MODEL_FILE", help="path of the model's .py file")
    build.add_argument(
        "--arch", default=",".join(DEFAULT_ARCHS),
        help="comma-separated GPU archs to compile cubins for (default: %(default)s); "
        "PTX of the lowest is kept for newer GPUs",
    )
    build.add_argument("--name", help="package (import) name; default: the model file's stem")
    build.add_argument("--out", default="dist", help="folder for the wheel (default: %(default)s)")
    build.add_argument("--version-tag", dest="package_version", default="0.1.0", metavar="VERSION",
                       help="version of the built package (default: %(default)s)")
    build.add_argument(
        "--dispatch", default="sequential", choices=["sequential", "round_robin", "auto"],
        help="how a combo kernel maps programs to sub-kernels (default: %(default)s; auto picks round robin "
        "when sub-kernels are within 20%% of each other's size)",
    )
    build.add_argument("--model-fn", default="get_model", help="function returning the model (default: %(default)s)")
    build.add_argument("--inputs-fn", default="get_example_inputs",
                       help="function returning the example inputs (default: %(default)s)")
    shapes = build.add_mutually_exclusive_group()
    shapes.add_argument(
        "--batch", metavar="SIZES",
        help="build one specialization (bucket) per batch size, e.g. 1,2,4,8; a call picks the bucket of its "
        "inputs' dim 0. Example inputs per size come from get_example_inputs(batch=N) when it takes batch, "
        "else the default ones cut or tiled along dim 0",
    )
    shapes.add_argument(
        "--dynamic", metavar="batch=MIN:MAX",
        help="compile once with a symbolic batch (dim 0 of the batched inputs) valid from MIN to MAX; grids "
        "are computed per call from the batch size",
    )
    build.add_argument("--pad", action="store_true",
                       help="with --batch: run a size between buckets in the next larger one, padded with zero rows "
                       "(the build checks on the CPU that padding leaves each row's outputs unchanged)")
    build.add_argument("--weights", choices=("packaged", "external"), default="packaged",
                       help="packaged (default): the wheel carries the model's weights; external: it carries none, "
                       "and load(weights=model.state_dict()) gives them (for weights too large to ship in a wheel)")
    build.add_argument("--no-cache", action="store_true",
                       help="do not read or write the build cache (see below)")
    build.add_argument("--no-pdl", action="store_true",
                       help="launch every kernel after the one before it has finished; by default, on sm_90 and "
                       "later, a kernel is launched while the one before it runs and waits for it on the GPU "
                       "(programmatic dependent launch), hiding most of the gap between them")
    build.add_argument("--no-native", action="store_true",
                       help="leave the C extensions out: the package launches kernels through ctypes (see below)")
    build.add_argument("-j", "--jobs", type=int, metavar="N",
                       help="kernels to compile at once (default: the CPUs available; 1: no worker processes)")
    _noise(build)

    inspect = commands.add_parser(
        "inspect",
        help="show what a built package holds",
        description="Show what a package built by aotcombo holds: archs, inputs, weights, versions, launches per "
        "forward against the un-combined count, and for each arch every combo kernel with its dependency level, "
        "the Inductor kernels it launches together, block sizes, grid, warps, registers and memory. Reads a wheel "
        "without installing it, an installed package without importing it, or an unpacked folder.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inspect.add_argument("target", metavar="WHEEL|PACKAGE|FOLDER",
                         help="a .whl file, an installed package's import name, or a folder")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of text")
    inspect.add_argument("--png", metavar="FILE", help="draw the combo partition of one arch into a PNG image")
    inspect.add_argument("--arch", help="the arch to show (text) or draw (--png; default: the first cubin arch)")
    _noise(inspect)

    cache = commands.add_parser("cache", help="show or clear the build cache",
                                description="Show where the build cache is and how much it holds.\n\n" + CACHE_HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    cache.add_argument("--clear", action="store_true", help="remove every entry")
    _noise(cache)
    return parser


def _noise(parser) -> None:
    noise = parser.add_mutually_exclusive_group()
    noise.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    noise.add_argument("-v", "--verbose", action="store_true", help="more detail, and tracebacks on errors")


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Called without ``argv`` (the ``aotcombo`` script, ``python -m aotcombo``)
    after a build, it ends the process itself once its output is flushed:
    tearing down the interpreter after Inductor was imported takes 1.5 s and
    has nothing left to do (temporary files are gone, the wheel is in place)."""
    code = _main(argv)
    if argv is None and _heavy_imports():
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed pipe: nothing more to say
                stream.flush()
        os._exit(code)
    return code


def _heavy_imports() -> bool:
    return "torch" in sys.modules


def _main(argv: list[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from ..progress import Reporter

    reporter = Reporter(quiet=args.quiet, verbose=args.verbose)
    try:
        return COMMANDS[args.command](args, reporter)
    except BuildError as exc:
        reporter.close()
        print(f"aotcombo: error: {exc.title}: {exc}", file=sys.stderr)
        if args.verbose:
            if exc.detail:
                print(exc.detail, file=sys.stderr)
            elif exc.__cause__ is not None:
                traceback.print_exception(exc.__cause__, file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        reporter.close()
        what = "; nothing was written" if args.command == "build" else ""
        print(f"aotcombo: interrupted{what}", file=sys.stderr)
        return INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one paragraph, no traceback
        reporter.close()
        if args.verbose:
            traceback.print_exc()
        text = str(exc).strip()
        print(
            f"aotcombo: internal error: {type(exc).__name__}: {text.splitlines()[0] if text else ''}\n"
            f"  nothing was written; rerun with --verbose for the traceback and report it",
            file=sys.stderr,
        )
        return INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
