"""Rendering from the Jinja templates: combo kernels and the package program."""

import ast
import dataclasses
from pathlib import Path

import pytest
from aotcombo.builder.codegen import combo as codegen_combo
from aotcombo.builder.codegen import program as codegen_program
from aotcombo.builder.codegen import render as codegen_render
from aotcombo.builder.compile import triton_job as compile_triton_job

from aotcombo.builder import graph as g
from aotcombo.builder.plan.combos import ComboLaunch, make_plan
from aotcombo.testing.graphs import Builder, pointwise, reduction


def two_kernel_plan(dispatch="sequential"):
    b = Builder()
    kernels = [pointwise("tri_a", n=4096), reduction("tri_b", x=64, r=512)]
    kernels = [
        g.Kernel(**{**k.__dict__, "source": source})
        for k, source in zip(
            kernels,
            [
                "@triton.jit\ndef tri_a(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):\n"
                "    xoffset = tl.program_id(0) * XBLOCK\n",
                "@triton.jit\ndef tri_b(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr):\n"
                "    R0_BLOCK: tl.constexpr = 512\n    xoffset = tl.program_id(0) * XBLOCK\n",
            ],
        )
    ]
    outs = [b.launch(k, [b.input()]) for k in kernels]
    return make_plan(b.graph(outs), dispatch=dispatch)


def test_combo_kernel_dispatches_on_program_id_ranges():
    combo = two_kernel_plan().combos[0]
    source = codegen_combo.render_combo(combo)
    ast.parse(source)
    assert "def tri_a(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr, pid_x, pid_y, pid_z):" in source
    assert "tl.program_id(0) * XBLOCK" not in source.split("def combo_0")[0]
    body = source.split("def combo_0")[1]
    assert "if pid < 4:" in body  # 4096 / 1024
    assert "elif pid < 12:" in body  # + 64 / 8
    assert "pid_offset = pid - 4" in body
    assert body.startswith("(in0, in1, in2, in3):")  # arg0_1, buf0, arg1_1, buf1 by position
    assert "tri_a(in_ptr0=in0, out_ptr0=in1, xnumel=4096, XBLOCK=1024, pid_x=pid_offset, pid_y=0, pid_z=0)" in body
    assert body.rstrip().endswith("else:\n        pass")
    assert combo.grid == 12


def test_round_robin_interleaves_programs():
    combo = two_kernel_plan("round_robin").combos[0]
    body = codegen_combo.render_combo(combo).split("def combo_0")[1]
    assert "if pid % 2 == 0 and pid // 2 < 4:" in body
    assert "elif pid % 2 == 1 and pid // 2 < 8:" in body
    assert combo.grid == 2 * 8


def test_combo_signature_types_and_alignment():
    combo = two_kernel_plan().combos[0]
    signature, aligned = codegen_combo.combo_signature(combo)
    assert signature == {"in0": "*fp32", "in1": "*fp32", "in2": "*fp32", "in3": "*fp32"}  # arg0_1 buf0 arg1_1 buf1
    assert aligned == []


def test_a_size_declared_i32_and_i64_is_passed_as_i64_and_cast_back():
    # Two kernels of one level take the same dynamic size, one as i32 and one as i64.
    b = Builder()
    x, y = b.input(), b.input()
    b.ops.append(g.Scalar("size", "size", (g.Ref(x), 0)))
    outs = []
    for name, ty, src in (("narrow", "i32", x), ("wide", "i64", y)):
        k = pointwise(name)
        k = g.Kernel(**{**k.__dict__, "signature": tuple((p, ty if p == "xnumel" else t) for p, t in k.signature),
                        "source": f"@triton.jit\ndef {name}(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):\n"
                                  "    xoffset = tl.program_id(0) * XBLOCK\n",
                        "dynamic_numels": ("x",)})
        out = f"{name}_out"
        b.ops.append(g.Alloc(out, g.TensorSpec((g.Ref("size"),), (1,), "float32")))
        b.kernels[name] = k
        b.ops.append(g.Launch(name, (g.Ref(src), g.Ref(out), g.Ref("size"))))
        outs.append(out)
    combo = make_plan(b.graph(outs)).combos[0]
    assert len(combo.subs) == 2
    signature, _ = codegen_combo.combo_signature(combo)
    assert combo.params == ("arg0_1", "narrow_out", "size", "arg1_1", "wide_out")
    assert signature["in2"] == "i64"
    source = codegen_combo.render_combo(combo)
    ast.parse(source)
    assert "narrow(in_ptr0=in0, out_ptr0=in1, xnumel=in2.to(tl.int32)," in source
    assert "wide(in_ptr0=in3, out_ptr0=in4, xnumel=in2," in source


def test_program_renders_ops_in_plan_order_and_nests_outputs():
    plan = two_kernel_plan()
    structure = ("dict", ("a", "b"), (("leaf",), ("tuple", (("leaf",),))))
    source = codegen_program.render_program(plan, structure, "demo")
    tree = ast.parse(source)
    forward = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    assert [a.arg for a in forward.args.args] == ["kernels", "weights", "device", "arg0_1", "arg1_1", "aotcombo_out"]
    assert "kernels[0](arg0_1, buf0, arg1_1, buf1)" in source
    # the outputs it allocates go where the caller says, when it says (graph mode's output slots)
    assert "buf0 = empty_strided((1024,), (1,), dtype=torch.float32, device=device) if aotcombo_out is None " \
           "else aotcombo_out[0]" in source and "else aotcombo_out[1]" in source
    assert "return {'a': buf0, 'b': (buf1,)}" in source
    assert "OrderedDict" not in source


def test_program_returns_an_ordered_dict_where_the_model_does():
    structure = ("tuple", (("ordered_dict", ("out", "aux"), (("leaf",), ("leaf",))),))
    source = codegen_program.render_program(two_kernel_plan(), structure, "demo")
    ast.parse(source)
    assert "from collections import OrderedDict" in source
    assert "return (OrderedDict([('out', buf0), ('aux', buf1)]),)" in source


def test_views_count_from_their_root_tensor_and_placed_outputs_go_where_the_caller_says():
    """A view's offset counts from the start of the tensor it views (an input may be a slice
    of a larger one; a placed output a slot inside one allocation), as Inductor's are."""
    import torch

    b = Builder()
    x = b.input()
    buf = b.launch(pointwise("copy_x", n=1024), [x])
    for name, base, offset in (("x_tail", x, 1000), ("buf_tail", buf, 1020), ("buf_tail_tail", "buf_tail", 1022)):
        b.ops.append(g.View(name, base, g.TensorSpec((2,), (1,), "float32", offset)))
    plan = make_plan(b.graph([buf, "x_tail", "buf_tail_tail"]))
    source = codegen_program.render_program(plan, ("tuple", (("leaf",),) * 3), "demo")
    assert "x_tail = as_strided(arg0_1, (2,), (1,), arg0_1.storage_offset() + 1000)" in source
    assert "buf_tail_tail = as_strided(buf_tail, (2,), (1,), buf0.storage_offset() + 1022)" in source
    namespace = {}
    exec(compile(source, "program", "exec"), namespace)

    def copy_x(x, out, *_):
        out.copy_(x)

    storage = torch.arange(2048.0)
    x = storage[1024:]  # an input that starts past its storage's beginning
    for out in (None, [torch.zeros(2048)[1024:]]):  # the program's own output, or the caller's tensor
        y, x_tail, buf_tail = namespace["forward"]([copy_x], [], "cpu", x, aotcombo_out=out)
        assert torch.equal(x_tail, x[1000:1002]) and torch.equal(buf_tail, x[1022:1024])
        assert out is None or y is out[0]


@pytest.mark.parametrize("value, text", [
    (g.Ref("buf3"), "buf3"),
    (g.Const("dtype", "bfloat16"), "torch.bfloat16"),
    (g.Const("device", "cuda"), "device"),
    ([1, g.Ref("x")], "[1, x]"),
    ((2,), "(2,)"),
    (float("inf"), "float('inf')"),
])
def test_argument_expressions(value, text):
    assert codegen_program._expr(value) == text


def test_templates_are_found_outside_the_source_tree(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert (codegen_render.templates_dir() / "combo_kernel.py.j2").is_file()


def test_installed_copy_finds_its_templates(tmp_path):
    """`pip install .` (not editable): the installed aotcombo renders from any folder, and has
    the C sources of the runtime's extensions (builder/compile/native.py compiles them into the wheel)."""
    import os
    import subprocess
    import sys

    probe = (
        "import aotcombo.builder.codegen.render as c, sys; "
        "print(c.__file__); print(c.templates_dir()); print(len(c.render('program.py.j2', name='x', version='0', "
        "n_launches=0, n_externs=0, inputs=['a'], weights=[], forward_weights=[], prepare=[], load=None, body=[], "
        "result='a', runtime_ops=[], placed='out', "
        "ordered_dict=False, group=None))); import aotcombo.builder.compile.native as n; "
        "print(all(p.is_file() for p in n.SOURCES.values()))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    if "No module named 'aotcombo'" in run.stderr:
        pytest.skip("aotcombo is not installed in this environment (only importable from the source tree)")
    assert run.returncode == 0, run.stderr
    module_file, templates, rendered, sources = run.stdout.split()
    assert (Path(templates) / "combo_kernel.py.j2").is_file()
    assert int(rendered) > 0 and sources == "True"


def test_only_launches_between_our_kernels_are_early():
    """PDL (``early_launches``): a combo first or after another is launched early; after an extern
    call (cuBLAS's, cuDNN's: measured slower) or a collective (a wait on NCCL's stream), not."""
    plan = two_kernel_plan()
    mm = g.Extern(op="aten::mm.out", args=(), kwargs=(), out=None, writes=())
    reduce = g.Extern(op=f"{g.COLLECTIVES}::all_reduce", args=(), kwargs=(), out=None, writes=())
    launch = [ComboLaunch(f"c{i}", ()) for i in range(6)]
    alloc = g.Alloc("t", g.TensorSpec((4,), (1,), "float32"))
    ops = (launch[0], mm, launch[1], launch[2], alloc, launch[3], reduce, launch[4], mm, mm, launch[5])
    assert codegen_combo.early_launches(dataclasses.replace(plan, ops=ops)) == {"c0", "c2", "c3"}


def test_pdl_waits_first_and_only_on_hopper_and_later():
    """With programmatic dependent launch the combo kernel waits for the kernel before it
    before anything else it does (griddepcontrol.wait), then lets the next one launch; the
    compiled binary says so (the runtime sets the launch attribute from it). sm_80 has no
    griddepcontrol: the pipeline renders pdl only from sm_90 on."""
    combo = two_kernel_plan().combos[0]
    plain, waiting = codegen_combo.render_combo(combo), codegen_combo.render_combo(combo, pdl=True)
    assert "gdc_" not in plain
    body = waiting.split("def combo_0")[1].splitlines()
    assert [line.strip() for line in body[1:7] if not line.strip().startswith("#")] == [
        "pid = tl.program_id(0)", "tl.extra.cuda.gdc_wait()", "tl.extra.cuda.gdc_launch_dependents()"]
    for pdl, trigger in ((True, False), (False, True)):
        body = codegen_combo.render_combo(combo, pdl=pdl, trigger=trigger).split("def combo_0")[1]
        assert ("gdc_wait()" in body) == pdl and ("gdc_launch_dependents()" in body) == trigger
    assert codegen_combo.PDL_MIN_ARCH == 90
    signature, aligned = codegen_combo.combo_signature(combo)
    job = compile_triton_job.Job("sm_90/combo_0", waiting, "combo_0", tuple(signature.items()), tuple(aligned), 90,
                       combo.num_warps)
    assert compile_triton_job.run_job(job).pdl
    assert not compile_triton_job.run_job(dataclasses.replace(job, source=plain)).pdl
