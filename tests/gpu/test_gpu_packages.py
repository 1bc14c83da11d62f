"""Built sample packages on a GPU: outputs match eager on fresh random inputs.

Run on a machine with a GPU through ``scripts/gpu_check.sh``, which installs the
wheels built on the GPU-less machine and runs ``pytest -m gpu``.
"""

import pytest
import torch

from aotcombo.testing.compare import compare
from aotcombo.testing.gpu import fresh_like, gpu_kernel_launches, import_package

pytestmark = pytest.mark.gpu


def test_package_matches_eager(sample):
    name, model, example = sample
    package = import_package(name)
    loaded = package.load("cuda")
    generator = torch.Generator(device="cuda").manual_seed(1234)
    for trial in range(3):
        inputs = [fresh_like(t, generator) for t in example]
        with torch.no_grad():
            ref = model(*inputs)
        got = loaded(*inputs)
        for error, tolerance in compare(got, ref):
            assert error <= tolerance, f"{name} trial {trial}: relative L2 error {error:.2e} > {tolerance:.0e}"


def test_package_launches_fewer_kernels_than_eager(sample):
    name, model, example = sample
    loaded = import_package(name).load("cuda")
    with torch.no_grad():
        eager = gpu_kernel_launches(model, *example)
    package = gpu_kernel_launches(loaded, *example)
    print(f"\n{name}: {package} GPU kernels per forward (eager: {eager})")
    assert package <= eager
