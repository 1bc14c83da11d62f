"""What ``aotcombo build``, ``inspect`` and ``cache`` do, given the parsed command line and a
``progress.Reporter``; each returns the exit status (errors are raised, ``cli`` reports them)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path


def _build_modules():
    """The build's modules; a build dependency that is missing is an environment error."""
    try:
        from ..builder.inputs import modelfile
        from ..builder.inputs import options
        from ..builder import pipeline

        return pipeline, modelfile, options
    except ImportError as exc:
        from ..builder.inputs.environment import BUILD_REQUIREMENTS, missing

        module = (exc.name or "").partition(".")[0]
        if module not in BUILD_REQUIREMENTS:
            raise
        raise missing(module) from exc


def _options(args, options_mod):
    """The build's options from the flags, checked before any model load: a typo in --arch or
    an unwritable --out should not cost a model load."""
    from ..errors import UsageError

    if args.pad and not (args.batch or args.buckets):
        raise UsageError("--pad needs --batch or --buckets",
                         fix="pass the bucket sizes, e.g. --batch 1,2,4,8 --pad or --buckets seq=128,256,512 --pad")
    shapes = None
    if args.batch:
        shapes = options_mod.parse_batch(args.batch, args.pad)
    elif args.buckets:
        shapes = options_mod.parse_buckets(args.buckets, args.pad)
    if args.dynamic:
        dynamic = options_mod.parse_dynamic(args.dynamic)
        shapes = dynamic if shapes is None else options_mod.check_shapes(dataclasses.replace(shapes, dynamic=dynamic))
    return options_mod.BuildOptions.checked(
        arch=args.arch, name=args.name or Path(args.model_file).stem.replace("-", "_"), out=args.out,
        version=args.package_version, dispatch=args.dispatch, shapes=shapes, cache=not args.no_cache, jobs=args.jobs,
        native=False if args.no_native else None, weights=args.weights, pdl=not args.no_pdl,
        tensor_parallel=args.tensor_parallel)


def _build(args, reporter) -> int:
    pipeline, modelfile, options_mod = _build_modules()
    from ..builder.inputs.environment import check_environment

    check_environment()
    options = _options(args, options_mod)
    if args.tp_plan_fn and options.tensor_parallel == 1:
        from ..errors import UsageError

        raise UsageError("--tp-plan-fn names a tensor-parallel plan, and the build is for one GPU",
                         fix="add --tensor-parallel N, or leave --tp-plan-fn out")
    path = Path(args.model_file)
    make_inputs = None
    with reporter.stage(f"load {path}", timing_key="load"):
        model, inputs = modelfile.load_model_file(path, args.model_fn, args.inputs_fn)
        if args.batch or args.dynamic:
            make_inputs = modelfile.batch_inputs_function(path, args.inputs_fn)
        axes = modelfile.dynamic_axes_of(path, args.axes_fn) if args.dynamic or args.buckets or args.axes_fn else None
        tp_plan = modelfile.defined(path, args.tp_plan_fn, "get_tp_plan") if options.tensor_parallel > 1 else None
    try:
        result = pipeline.build_package(model, inputs, options, reporter=reporter, model_file=path,
                                        make_inputs=make_inputs, dynamic_axes=axes, tp_plan=tp_plan)
    except Exception as exc:
        _blame_the_model(exc, modelfile, model, inputs, path, reporter)
        raise
    s = result.summary()
    c = result.cache

    def count(n: int, one: str, many: str) -> str:
        return f"{n} {one if n == 1 else many}"

    reporter.line(
        f"{options.name}: {count(s['kernels'], 'kernel', 'kernels')} in "
        f"{count(s['combos'], 'combo launch', 'combo launches')} + "
        f"{count(s['extern_calls'], 'extern call', 'extern calls')} = "
        f"{count(s['launches_per_forward'], 'launch', 'launches')} per forward"
        + (f"; {count(s['load_launches'], 'launch', 'launches')} on the weights alone once at load"
           if s["load_launches"] else "")
        + "".join(f"; calls of up to {tokens} tokens: {count(n, 'launch', 'launches')}"
                  for tokens, n in s["size_classes"].items())
    )
    if c["enabled"]:
        reporter.detail(f"build cache {c['dir']}: traces {c['traces_cached']}/{c['traces']} cached, kernels "
                        f"{c['kernels_cached']} cached + {c['kernels_compiled']} compiled")
    reporter.detail("times: " + ", ".join(f"{k} {v:.1f} s" for k, v in result.timings.items()))
    if not args.quiet:
        for wheel in result.wheels:
            print(wheel)
    return 0


def _blame_the_model(exc: Exception, modelfile, model, inputs, path: Path, reporter) -> None:
    """After a failed build, whether the model itself fails on its example inputs in eager
    PyTorch: then that (``ModelFileError``, naming the model file's line) is raised from the
    build's error, the cause a user fixes first. The check costs a forward on the CPU (BERT-base
    in float16: 3.9 s of a 13 s build), so a build that succeeds never pays it."""
    from ..errors import BuildError, UnsupportedModelError

    if isinstance(exc, BuildError) and not isinstance(exc, UnsupportedModelError):
        return  # bad arguments, the environment, the output folder: not the model's doing
    reporter.detail("the build failed: running the model in eager PyTorch to see whether it fails on its own")
    try:
        modelfile.run_eager(model, inputs, path=path)
    except BuildError as model_error:
        raise model_error from exc


def _inspect(args, reporter) -> int:
    from .inspection import format_text, inspect_package, render_png

    info = inspect_package(args.target)
    if args.arch and args.arch not in info["variants"]:
        from ..errors import UsageError

        raise UsageError(f"{info['name']} has no variant {args.arch}",
                         fix=f"choose among {', '.join(info['variants'])}")
    if args.json:
        print(json.dumps(info, indent=1, sort_keys=True))
    elif not args.quiet or not args.png:
        sys.stdout.write(format_text(info, args.arch))
    sys.stdout.flush()
    if args.png:
        png = Path(args.png)
        try:
            render_png(info, png, args.arch)
        except OSError as exc:
            from ..errors import OutputError

            raise OutputError(f"cannot write {png}: {exc.strerror or exc}",
                              fix="pass --png with a writable path") from exc
        reporter.line(f"wrote {png}")
    return 0


def _cache(args, reporter) -> int:
    from ..builder.cache.store import Cache, default_dir

    cache = Cache(default_dir())
    if args.clear:
        freed = cache.clear()
        reporter.line(f"cleared {cache.root} ({freed / 1e6:.1f} MB)")
        return 0
    usage = cache.usage()
    print(f"{cache.root}")
    for kind, u in usage.items():
        print(f"  {kind}: {u['entries']} entries, {u['bytes'] / 1e6:.1f} MB")
    return 0


COMMANDS = {"build": _build, "inspect": _inspect, "cache": _cache}
