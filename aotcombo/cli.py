"""The ``aotcombo`` command line."""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

from . import __version__
from .errors import BuildError

INTERNAL_ERROR = 70  # EX_SOFTWARE

EPILOG = """\
exit status: 0 done; 2 bad arguments; 3 model file; 4 unsupported model;
5 kernel compile failed; 6 build environment; 7 cannot write output;
70 internal error (rerun with --verbose and report it).

examples:
  aotcombo build sample_models/branches.py
  aotcombo build model.py --arch sm_80,sm_90 --name mymodel --out dist/
  pip install dist/mymodel-*.whl && python -c "import mymodel; m = mymodel.load('cuda')"
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
        "runs the model for exactly those input shapes, dtypes and strides.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    build.add_argument("model_file", metavar="MODEL_FILE", help="path of the model's .py file")
    build.add_argument(
        "--arch", default="sm_80,sm_90", help="comma-separated GPU archs to compile cubins for (default: %(default)s); "
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
    noise = build.add_mutually_exclusive_group()
    noise.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    noise.add_argument("-v", "--verbose", action="store_true", help="more detail, and tracebacks on errors")
    return parser


def _build(args) -> int:
    from .build import build, check_environment, parse_archs
    from .modelfile import load_model_file, run_eager
    from .package import check_name
    from .progress import Reporter

    reporter = Reporter(quiet=args.quiet, verbose=args.verbose)
    path = Path(args.model_file)
    name = args.name or path.stem
    # Cheap checks first: a typo in --arch should not cost a model load.
    check_environment()
    parse_archs([a for a in args.arch.split(",") if a.strip()])
    check_name(name)
    with reporter.stage(f"load {path}"):
        model, inputs = load_model_file(path, args.model_fn, args.inputs_fn)
        run_eager(model, inputs, path=path)
    result = build(
        model,
        inputs,
        arch=[a for a in args.arch.split(",") if a.strip()],
        name=name,
        out=args.out,
        dispatch=args.dispatch,
        version=args.package_version,
        reporter=reporter,
    )
    s = result.summary()
    reporter.line(
        f"{name}: {s['kernels']} kernels in {s['combos']} combo launches + {s['extern_calls']} extern calls "
        f"= {s['launches_per_forward']} launches per forward"
    )
    if not args.quiet:
        print(result.wheel)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return _build(args)
    except BuildError as exc:
        print(f"aotcombo: error: {exc.title}: {exc}", file=sys.stderr)
        if args.verbose and exc.__cause__ is not None:
            traceback.print_exception(exc.__cause__, file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("aotcombo: interrupted; nothing was written", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one paragraph, no traceback
        if args.verbose:
            traceback.print_exc()
        print(
            f"aotcombo: internal error: {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}\n"
            "  nothing was written; rerun with --verbose for the traceback and report it",
            file=sys.stderr,
        )
        return INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
