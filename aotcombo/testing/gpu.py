"""Built packages on a GPU: the sample packages' names, fresh inputs, threads, the installed
package, kernel launches counted. (Outputs are compared with ``compare.compare``.)"""

from __future__ import annotations

import importlib
import os
import threading

import torch

SAMPLES = ("branches", "transformer_block", "adam_step", "conv_block")


def fresh_like(t: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A new random tensor like ``t``: uniform in [0, max] when ``t`` is non-negative
    (variances, counts), else normal with ``t``'s scale. Never zeros."""
    if t.is_floating_point():
        ref = t.double()
        if bool((ref >= 0).all()):
            hi = float(ref.max()) or 1.0
            out = torch.rand(t.shape, generator=generator, dtype=torch.float64, device=t.device) * hi
        else:
            std = float(ref.std()) if t.numel() > 1 else 1.0
            out = torch.randn(t.shape, generator=generator, dtype=torch.float64, device=t.device) * (std or 1.0)
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).copy_(out)
    return t.clone()


def run_threads(worker, count: int = 2) -> None:
    """``worker(i)`` in ``count`` threads at once; fails with every exception they raised."""
    failures = []

    def run(i):
        try:
            worker(i)
        except Exception as e:  # noqa: BLE001 (reported below)
            failures.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures


def import_package(name: str):
    """The installed package ``name``; fails (not skips) when AOTCOMBO_REQUIRE_PACKAGES=1."""
    try:
        return importlib.import_module(name)
    except ImportError:
        if os.environ.get("AOTCOMBO_REQUIRE_PACKAGES") == "1":
            raise
        import pytest

        pytest.skip(f"package {name} is not installed (scripts/gpu_check.sh installs the built wheels)")


def gpu_kernel_launches(fn, *args) -> int:
    """GPU kernels one call of ``fn`` runs, counted with the torch profiler
    (CUDA kernel events; memcpy and memset excluded), after two warm-up calls (a package
    in graph mode captures its graph at its second call)."""
    from torch.profiler import ProfilerActivity, profile

    fn(*args)
    fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(1 for n in names if "memcpy" not in n.lower() and "memset" not in n.lower())
