"""The ``aotcombo`` command line: ``build``, ``inspect``, ``cache``."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback

from .. import __version__
from ..builder.compile.scheduler import MAX_WORKERS
from ..builder.inputs.options import DEFAULT_ARCHS
from ..errors import EXIT_STATUSES, INTERNAL_ERROR, INTERRUPTED, BuildError
from .commands import COMMANDS

EPILOG = "exit status: " + "; ".join(f"{code} {what}" for code, what in EXIT_STATUSES) + """.

examples:
  aotcombo build sample_models/branches.py
  aotcombo build model.py --arch sm_80,sm_90 --name mymodel --out dist/
  aotcombo inspect dist/mymodel-0.1.0-py3-none-any.whl --png partition.png
  pip install --no-index --find-links dist/ mymodel && python -c "import mymodel; m = mymodel.load('cuda')"
"""

CACHE_HELP = """\
build cache: compiled kernels and traces are kept in $AOTCOMBO_CACHE_DIR, else
$XDG_CACHE_HOME/aotcombo, else ~/.cache/aotcombo, so an unchanged model rebuilds in
seconds; --no-cache (or AOTCOMBO_NO_CACHE=1) builds from scratch without reading or
writing it. The same model, inputs, archs and tool versions give byte-identical
wheels, cached or not. On Linux with two CPUs or more, traces run two at a time
(each arch beside the one before, in a forked process; or a dynamic build's two
programs); AOTCOMBO_TRACE_PROCESSES=1 traces one after the other.
"""

NATIVE_HELP = """C extensions: a build writes two wheels. NAME-VERSION-py3-none-any.whl is pure
Python: it launches kernels through ctypes and checks inputs with torch's
TensorGuards, and installs anywhere torch does. The second, tagged
cp310-abi3-<platform>, also carries the runtime's kernel launcher and input guard
compiled from C ($CC, else cc, and this Python's headers) for CPython >= 3.10 on
this platform; pip picks it where it fits, and the package falls back to ctypes
where the extensions do not load. Without a C compiler or the headers: a warning,
and the pure wheel only. The C compiler counts among the tool versions above;
--no-native (or AOTCOMBO_NATIVE=0) writes the pure wheel only.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aotcombo",
        description="Ahead-of-time kernel packager for PyTorch: trace a model through TorchInductor "
        "on a machine without a GPU, fuse independent kernels into combo kernels, compile them to "
        "cubins for each GPU arch, and ship it all as wheels whose runtime needs only torch and "
        "the CUDA driver.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"aotcombo {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    build = commands.add_parser(
        "build",
        help="build wheels from a model file",
        description="Build installable wheels (see C extensions below) from MODEL_FILE, a Python file "
        "defining get_model() "
        "(an nn.Module on the CPU) and get_example_inputs() (a tuple of CPU tensors, or a dict of them "
        "keyed by forward's parameter names, as a tokenizer gives them). The package "
        "runs the model for exactly those input shapes, dtypes and strides, for several batch sizes "
        "(--batch), or for ranges of sizes on named axes (--dynamic).",
        epilog=CACHE_HELP + "\n" + NATIVE_HELP + "\n" + EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    build.add_argument("model_file", metavar="MODEL_FILE", help="path of the model's .py file")
    build.add_argument(
        "--arch", default=",".join(DEFAULT_ARCHS),
        help="comma-separated GPU archs to compile cubins for (default: %(default)s); "
        "PTX of the lowest is kept for newer GPUs",
    )
    build.add_argument("--name", help="package (import) name; default: the model file's stem, - replaced by _")
    build.add_argument("--out", default="dist", help="folder for the wheels (default: %(default)s)")
    build.add_argument("--version-tag", dest="package_version", default="0.1.0", metavar="VERSION",
                       help="version of the built package (default: %(default)s)")
    build.add_argument(
        "--dispatch", default="sequential", choices=["sequential", "round_robin", "auto"],
        help="how a combo kernel maps programs to sub-kernels (default: %(default)s; auto: round robin for a "
        "combo whose sub-kernels' program counts average over 80%% of the largest, so that under 20%% of its "
        "programs idle, else sequential)",
    )
    build.add_argument("--model-fn", default="get_model", help="function returning the model (default: %(default)s)")
    build.add_argument("--inputs-fn", default="get_example_inputs",
                       help="function returning the example inputs (default: %(default)s)")
    build.add_argument("--axes-fn", default=None,
                       help="function returning the model's named dynamic axes, for --dynamic (default: "
                       "get_dynamic_axes, if the file defines it)")
    shapes = build.add_mutually_exclusive_group()
    shapes.add_argument(
        "--batch", metavar="SIZES",
        help="build one specialization (bucket) per batch size, e.g. 1,2,4,8; a call picks the bucket of its "
        "inputs' dim 0. Example inputs per size come from get_example_inputs(batch=N) when it takes batch, "
        "else the default ones cut or tiled along dim 0",
    )
    shapes.add_argument(
        "--buckets", metavar="AXIS=SIZES",
        help="one specialization per size of an axis the model file's get_dynamic_axes() names, e.g. "
        "seq=128,256,512 (batch=1,2,4 is --batch 1,2,4)",
    )
    build.add_argument(
        "--dynamic", metavar="AXIS=MIN:MAX,...",
        help="compile once with symbolic sizes, e.g. batch=1:32 or batch=1:32,seq=1:512: one set of kernels "
        "serves every size in range, grids computed per call. batch is dim 0 of the batched inputs; other axes "
        "are those the model file's get_dynamic_axes() names ({input name: {dim: axis}}, torch.onnx.export's "
        "dynamic_axes form). With --batch or --buckets on another axis: those axes symbolic in every bucket "
        "(e.g. --buckets seq=128,256,512 --dynamic batch=1:32)",
    )
    build.add_argument("--pad", action="store_true",
                       help="with --batch or --buckets: run a size between buckets in the next larger one, padded "
                       "with zeros along the axis (the build checks on the CPU that padding leaves the outputs, cut "
                       "back, and the model's state unchanged: for a sequence, the model's mask must hide the padding)")
    build.add_argument("--weights", choices=("packaged", "external"), default="packaged",
                       help="packaged (default): the wheel carries the model's weights; external: it carries none, "
                       "and load(weights=model.state_dict()) gives them (for weights too large to ship in a wheel)")
    build.add_argument("--tensor-parallel", type=int, default=1, metavar="N",
                       help="split the model over N GPUs (torch.distributed, NCCL): each rank holds 1/N of the "
                       "planned layers' weights; the model file's get_tp_plan() (a torch parallelize_module plan) "
                       "says which, else Llama-style blocks are split by their layers' names. Run the package "
                       "under torchrun: pkg.load('cuda') in each rank")
    build.add_argument("--tp-plan-fn", default=None,
                       help="function returning the tensor-parallel plan (default: get_tp_plan, if the file "
                       "defines it)")
    build.add_argument("--no-cache", action="store_true",
                       help="do not read or write the build cache (see below)")
    build.add_argument("--no-pdl", action="store_true",
                       help="launch every kernel after the one before it has finished; by default, on sm_90 and "
                       "later, a kernel that follows another of the package's is launched while that one runs "
                       "and waits for it on the GPU (programmatic dependent launch), hiding most of the gap "
                       "between them")
    build.add_argument("--no-native", action="store_true",
                       help="write the pure wheel only, without the C extensions: the package launches kernels "
                       "through ctypes (see below)")
    build.add_argument("-j", "--jobs", type=int, metavar="N",
                       help=f"kernels to compile at once (default: the CPUs available), in up to {MAX_WORKERS} worker "
                       "processes started when the compiles ahead pay for them; 1: none, all in this process")
    _noise(build, quiet="print only errors and warnings: no progress, summary or wheel paths")

    inspect = commands.add_parser(
        "inspect",
        help="show what a built package holds",
        description="Show what a package built by aotcombo holds: archs, inputs, batch sizes, weights, versions, "
        "launches per forward against the un-combined count, and for each arch its launches in order: extern calls, "
        "and combo kernels with their dependency level, the Inductor kernels each launches together, block sizes, "
        "grid, warps, registers and memory (the PTX variant in one line, unless --arch ptx). Reads a wheel "
        "without installing it, an installed package without importing it, or an unpacked folder.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inspect.add_argument("target", metavar="WHEEL|PACKAGE|FOLDER",
                         help="a .whl file, an installed package's import name, or a folder: the package's own "
                         "(holding manifest.json) or one holding it (an unpacked wheel)")
    inspect.add_argument("--json", action="store_true",
                         help="print JSON instead of text, with every variant whatever --arch")
    inspect.add_argument("--png", metavar="FILE",
                         help="also draw the combo partition of one arch into a PNG image (needs matplotlib: "
                         "pip install 'aotcombo[png]')")
    inspect.add_argument("--arch",
                         help="the one variant to show (text) or draw (--png; default: the first cubin arch): "
                         "an arch such as sm_90, or ptx")
    _noise(inspect, quiet="with --png: print nothing but errors (without it, the report still prints)",
           verbose="tracebacks on errors")

    cache = commands.add_parser("cache", help="show or clear the build cache",
                                description="Show where the build cache is and how much it holds.\n\n" + CACHE_HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    cache.add_argument("--clear", action="store_true", help="remove every entry")
    _noise(cache, quiet="with --clear: print nothing but errors", verbose="tracebacks on errors")
    return parser


def _noise(parser, quiet: str, verbose: str = "more detail, and tracebacks on errors") -> None:
    noise = parser.add_mutually_exclusive_group()
    noise.add_argument("-q", "--quiet", action="store_true", help=quiet)
    noise.add_argument("-v", "--verbose", action="store_true", help=verbose)


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
        return _interrupted(args, reporter)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one paragraph, no traceback
        if _from_interrupt(exc):
            return _interrupted(args, reporter)
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


def _interrupted(args, reporter) -> int:
    reporter.close()
    what = "; nothing was written" if args.command == "build" else ""
    print(f"aotcombo: interrupted{what}", file=sys.stderr)
    return INTERRUPTED


def _from_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` wraps a Ctrl-C: Python 3.11 turns one raised in a class's ``__set_name__``
    (a module imported mid-build) into ``RuntimeError("Error calling __set_name__ ...")``."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


if __name__ == "__main__":
    sys.exit(main())
