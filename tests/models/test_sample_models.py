"""The sample models: they load through load_model_file with their default
shapes, run in eager on the CPU, and build small variants through keywords."""

import importlib.util
import inspect
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from aotcombo.builder.inputs.modelfile import load_model_file, run_eager

SAMPLES = Path(__file__).resolve().parents[2] / "sample_models"
NAMES = ["branches", "transformer_block", "adam_step", "conv_block"]


def import_sample(name):
    spec = importlib.util.spec_from_file_location(f"_sample_{name}", SAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make(name, **shapes):
    module = import_sample(name)
    return module.get_model(**shapes).eval(), module.get_example_inputs(**shapes)


def build(name, **shapes):
    model, inputs = make(name, **shapes)
    with torch.no_grad():
        out = model(*inputs)
    return model, inputs, out


def as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def all_finite(tensors):
    return all(torch.isfinite(t).all() for t in tensors)


def adam_numels(n, lo, hi):
    return [round(lo * (hi / lo) ** (i / (n - 1))) for i in range(n)]


# --- the contract, on the files as a user would pass them ---------------------------


@pytest.mark.parametrize("name", NAMES)
def test_contract(name):
    module = import_sample(name)
    assert module.__doc__ and module.__doc__.strip()
    model_sig = inspect.signature(module.get_model).parameters
    inputs_sig = inspect.signature(module.get_example_inputs).parameters
    assert list(model_sig) == list(inputs_sig) and model_sig
    for p in model_sig.values():
        assert p.default is not p.empty and inputs_sig[p.name].default == p.default


def expected_default_outputs(name):
    """(shape, dtype) of each output of the default-shaped model."""
    if name == "branches":
        return [((64, 256 + 32 * i), torch.bfloat16) for i in range(24)]
    if name == "transformer_block":
        return [((4, 256, 768), torch.bfloat16)]
    if name == "adam_step":
        return [((n,), torch.float32) for n in adam_numels(64, 1000, 1_000_000)] * 3
    if name == "conv_block":
        return [((8, 64), torch.float16)]
    raise AssertionError(name)


@pytest.mark.parametrize("name", NAMES)
def test_default_shapes_load_and_run(name):
    model, inputs = load_model_file(SAMPLES / f"{name}.py")
    assert not model.training
    assert all(t.device.type == "cpu" for t in inputs)
    outs = as_tuple(run_eager(model, inputs))
    assert [(tuple(o.shape), o.dtype) for o in outs] == expected_default_outputs(name)
    assert all_finite(outs)


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_and_random(name):
    m1, i1 = make(name)
    m2, i2 = make(name)
    for a, b in zip([*m1.state_dict().values(), *i1], [*m2.state_dict().values(), *i2]):
        assert torch.equal(a, b)
    for t in [*m1.parameters(), *i1]:
        if t.numel() > 1:
            assert t.float().std() > 0, "random, not constant"


# --- small variants --------------------------------------------------------------


def test_branches_small():
    shapes = dict(n_branches=3, rows=4, base=16, step=8, dtype=torch.float32)
    model, inputs, out = build("branches", **shapes)
    assert len(inputs) == 3 and len(out) == 3
    assert [tuple(o.shape) for o in out] == [(4, 16), (4, 24), (4, 32)]
    assert all(o.dtype == torch.float32 for o in out) and all_finite(out)
    for x, w, b, y in zip(inputs, model.weights, model.biases, out):
        torch.testing.assert_close(y, F.layer_norm(F.gelu(x * w + b), (x.shape[-1],)))


def test_transformer_block_small():
    shapes = dict(batch=2, seq=8, d_model=32, n_heads=4, dtype=torch.float32)
    model, (x,), out = build("transformer_block", **shapes)
    assert out.shape == (2, 8, 32) and out.dtype == torch.float32 and all_finite([out])
    # Causal: changing the last token leaves earlier positions unchanged.
    x2 = x.clone()
    x2[:, -1] += 1.0
    with torch.no_grad():
        out2 = model(x2)
    torch.testing.assert_close(out2[:, :-1], out[:, :-1])
    assert not torch.allclose(out2[:, -1], out[:, -1])


def test_transformer_block_small_bf16():
    _, _, out = build("transformer_block", batch=1, seq=4, d_model=16, n_heads=2)
    assert out.shape == (1, 4, 16) and out.dtype == torch.bfloat16 and all_finite([out])


def test_adam_step_small_matches_torch_adamw():
    adam = import_sample("adam_step")
    n = 4
    model, inputs, out = build("adam_step", n_tensors=n, min_numel=10, max_numel=1000)
    numels = adam_numels(n, 10, 1000)
    assert [t.numel() for t in inputs] == numels * 4 and len(out) == 3 * n
    assert [o.numel() for o in out] == numels * 3 and all(o.dtype == torch.float32 for o in out)
    assert all((v >= 0).all() for v in inputs[3 * n :])
    assert not list(model.parameters())

    params = [p.clone() for p in inputs[:n]]
    before = [t.clone() for t in inputs]
    opt = torch.optim.AdamW(
        params, lr=adam.LR, betas=(adam.BETA1, adam.BETA2), eps=adam.EPS, weight_decay=adam.WEIGHT_DECAY, foreach=False
    )
    for i, p in enumerate(params):
        p.grad = inputs[n + i].clone()
        opt.state[p] = dict(
            step=torch.tensor(float(adam.STEP - 1)),
            exp_avg=inputs[2 * n + i].clone(),
            exp_avg_sq=inputs[3 * n + i].clone(),
        )
    opt.step()
    for i, p in enumerate(params):
        torch.testing.assert_close(out[i], p)
        torch.testing.assert_close(out[n + i], opt.state[p]["exp_avg"])
        torch.testing.assert_close(out[2 * n + i], opt.state[p]["exp_avg_sq"])
    assert all(torch.equal(a, b) for a, b in zip(inputs, before)), "out of place"
    assert math.isclose(adam.BIAS_CORRECTION1, 1 - 0.9**10)


def test_conv_block_small():
    model, (x,), out = build("conv_block", batch=2, channels=8, size=6, dtype=torch.float32)
    assert out.shape == (2, 8) and out.dtype == torch.float32 and all_finite([out])
    bn = model.bn
    assert bn.running_mean.abs().sum() > 0 and not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))
    assert model.conv.bias is None and model.conv.weight.shape == (8, 8, 3, 3)
    y = F.conv2d(x, model.conv.weight, padding=1)
    y = (y - bn.running_mean[:, None, None]) / torch.sqrt(bn.running_var[:, None, None] + bn.eps)
    y = torch.relu(y * bn.weight[:, None, None] + bn.bias[:, None, None]) + x
    torch.testing.assert_close(out, y.mean(dim=(2, 3)))


def test_conv_block_small_fp16():
    _, _, out = build("conv_block", batch=1, channels=4, size=5)
    assert out.shape == (1, 4) and out.dtype == torch.float16 and all_finite([out])
