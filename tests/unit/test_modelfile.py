"""load_model_file / run_eager: the success path and every model-file error."""

import sys
import textwrap

import pytest
import torch
from torch import nn

from aotcombo.errors import ModelFileError
from aotcombo.builder.inputs.modelfile import load_model_file, run_eager

GOOD = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))

def get_model():
    torch.manual_seed(0)
    return Net()

def get_example_inputs():
    return (torch.randn(2, 8),)
"""


def write(folder, text, name="model.py"):
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def load_error(path, **kwargs) -> ModelFileError:
    with pytest.raises(ModelFileError) as info:
        load_model_file(path, **kwargs)
    err = info.value
    assert str(path) in err.message, "every message names the file"
    assert "\n" not in err.message, "one paragraph"
    assert err.fix
    assert err.exit_code == 3
    return err


# --- success -----------------------------------------------------------------------


def test_loads_model_and_inputs(tmp_path):
    model, inputs = load_model_file(write(tmp_path, GOOD))
    assert isinstance(model, nn.Module) and not model.training
    assert isinstance(inputs, tuple) and len(inputs) == 1 and inputs[0].shape == (2, 8)
    out = run_eager(model, inputs)
    assert out.shape == (2, 4) and not out.requires_grad


def test_accepts_str_path_and_custom_function_names(tmp_path):
    path = write(tmp_path, GOOD.replace("def get_model", "def build").replace("def get_example_inputs", "def inputs"))
    model, inputs = load_model_file(str(path), model_fn="build", inputs_fn="inputs")
    assert isinstance(model, nn.Module) and len(inputs) == 1


def test_single_tensor_and_list_are_accepted(tmp_path):
    path = write(tmp_path, GOOD.replace("return (torch.randn(2, 8),)", "return torch.randn(2, 8)"))
    assert len(load_model_file(path)[1]) == 1
    path = write(tmp_path, GOOD.replace("return (torch.randn(2, 8),)", "return [torch.randn(2, 8)]"), "m2.py")
    inputs = load_model_file(path)[1]
    assert isinstance(inputs, tuple) and len(inputs) == 1


def test_sys_path_and_sys_modules_restored(tmp_path):
    path_before, modules_before = list(sys.path), set(sys.modules)
    load_model_file(write(tmp_path, GOOD))
    assert sys.path == path_before
    assert not [m for m in set(sys.modules) - modules_before if "aotcombo_model" in m]


def test_sys_path_restored_after_error(tmp_path):
    before = list(sys.path)
    load_error(write(tmp_path, "import sys\nsys.path.append('x')\nraise RuntimeError('boom')\n"))
    assert sys.path == before


def test_main_block_is_not_run(tmp_path):
    model, _ = load_model_file(write(tmp_path, GOOD + "\nif __name__ == '__main__':\n    raise SystemExit(9)\n"))
    assert isinstance(model, nn.Module)


def test_sibling_import_works_and_is_forgotten(tmp_path):
    for tag, width in (("a", 3), ("b", 5)):
        folder = tmp_path / tag
        folder.mkdir()
        write(folder, f"WIDTH = {width}\n", "helpers_for_model.py")
        write(
            folder,
            """
            import torch
            from torch import nn
            import helpers_for_model

            def get_model():
                return nn.Linear(helpers_for_model.WIDTH, 2)

            def get_example_inputs():
                return (torch.randn(1, helpers_for_model.WIDTH),)
            """,
        )
    # Both folders have their own helpers_for_model.py: each file gets its own.
    for tag, width in (("a", 3), ("b", 5)):
        model, inputs = load_model_file(tmp_path / tag / "model.py")
        assert model.in_features == width and inputs[0].shape == (1, width)
        assert "helpers_for_model" not in sys.modules


def test_dataclass_in_model_file(tmp_path):
    # dataclasses look the defining module up in sys.modules while the file runs.
    path = write(
        tmp_path,
        """
        from dataclasses import dataclass
        import torch
        from torch import nn

        @dataclass
        class Config:
            width: int = 4

        def get_model():
            return nn.Linear(Config().width, 2)

        def get_example_inputs():
            return (torch.randn(1, Config().width),)
        """,
    )
    assert load_model_file(path)[0].in_features == 4


# --- the file itself --------------------------------------------------------------


def test_missing_file(tmp_path):
    err = load_error(tmp_path / "nope.py")
    assert "does not exist" in err.message


def test_not_a_python_file(tmp_path):
    path = write(tmp_path, GOOD, "model.txt")
    assert "not a .py file" in load_error(path).message


def test_folder_is_not_a_model_file(tmp_path):
    folder = tmp_path / "dir.py"
    folder.mkdir()
    assert "folder" in load_error(folder).message


def test_file_raises_on_import(tmp_path):
    path = write(tmp_path, "import torch\n\nx = 1\nraise ValueError('bad config')\n")
    msg = load_error(path).message
    assert "ValueError: bad config" in msg
    assert "line 4" in msg and "raise ValueError('bad config')" in msg


def test_syntax_error_names_line(tmp_path):
    path = write(tmp_path, "import torch\n\ndef get_model(:\n    pass\n")
    msg = load_error(path).message
    assert "SyntaxError" in msg and "line 3" in msg


def test_sys_exit_on_import(tmp_path):
    msg = load_error(write(tmp_path, "import sys\nsys.exit(2)\n")).message
    assert "SystemExit" in msg and "line 2" in msg


def test_error_in_sibling_module_names_both_lines(tmp_path):
    write(tmp_path, "x = 1\nraise KeyError('inner')\n", "broken_helper_mod.py")
    msg = load_error(write(tmp_path, "import torch\nimport broken_helper_mod\n")).message
    assert "KeyError" in msg
    assert "model.py line 2" in msg and "broken_helper_mod.py line 2" in msg


# --- the two functions -------------------------------------------------------------


def test_missing_function_lists_what_is_defined(tmp_path):
    path = write(
        tmp_path,
        """
        import torch
        from torch.nn.functional import relu

        class MyNet(torch.nn.Module):
            pass

        def make_model():
            return MyNet()

        def _private():
            pass

        def get_example_inputs():
            return (torch.randn(1),)
        """,
    )
    msg = load_error(path).message
    assert "get_model" in msg
    assert "MyNet" in msg and "make_model" in msg and "get_example_inputs" in msg
    assert "_private" not in msg and "relu" not in msg


def test_missing_inputs_function(tmp_path):
    path = write(tmp_path, "import torch\ndef get_model():\n    return torch.nn.Linear(1, 1)\n")
    msg = load_error(path).message
    assert "get_example_inputs" in msg and "get_model" in msg


def test_function_not_callable(tmp_path):
    path = write(tmp_path, GOOD + "\nget_model = 3\n")
    assert "int" in load_error(path).message


def test_function_requires_arguments(tmp_path):
    path = write(tmp_path, GOOD.replace("def get_model():", "def get_model(width):"))
    msg = load_error(path).message
    assert "width" in msg and "no arguments" in msg


def test_get_model_raises(tmp_path):
    path = write(tmp_path, GOOD.replace("torch.manual_seed(0)", "raise RuntimeError('no weights here')"))
    msg = load_error(path).message
    assert "get_model() raised RuntimeError: no weights here" in msg
    line = textwrap.dedent(GOOD).splitlines().index("    torch.manual_seed(0)") + 1
    assert f"line {line}" in msg


def test_get_model_error_deep_in_torch_names_model_line(tmp_path):
    path = write(tmp_path, GOOD.replace("return Net()", "return nn.Linear(-1, 2)"))
    msg = load_error(path).message
    assert "get_model() raised" in msg and "nn.Linear(-1, 2)" in msg


def test_get_model_returns_non_module(tmp_path):
    path = write(tmp_path, GOOD.replace("return Net()", "return {'w': 1}"))
    msg = load_error(path).message
    assert "torch.nn.Module" in msg and "dict" in msg


def test_get_model_returns_the_class(tmp_path):
    err = load_error(write(tmp_path, GOOD.replace("return Net()", "return Net")))
    assert "class Net" in err.message and "Net(...)" in err.fix


def test_get_example_inputs_raises(tmp_path):
    path = write(tmp_path, GOOD.replace("return (torch.randn(2, 8),)",
                                        "return (torch.randn(2, 8) @ torch.randn(3, 3),)"))
    msg = load_error(path).message
    assert "get_example_inputs() raised RuntimeError" in msg and "torch.randn(3, 3)" in msg


def test_get_example_inputs_returns_non_sequence(tmp_path):
    path = write(tmp_path, GOOD.replace("return (torch.randn(2, 8),)", "return {torch.randn(2, 8)}"))
    err = load_error(path)
    assert "tuple of tensors" in err.message and "set" in err.message and "dict" in err.fix  # a dict by name is one


def test_get_example_inputs_by_name_must_name_forwards_parameters(tmp_path):
    path = write(tmp_path, GOOD.replace("return (torch.randn(2, 8),)", "return {'y': torch.randn(2, 8)}"))
    msg = load_error(path).message
    assert "names the input 'y'" in msg and "does not take" in msg


def test_non_tensor_input_names_position_and_type(tmp_path):
    path = write(tmp_path, GOOD.replace("return (torch.randn(2, 8),)", "return (torch.randn(2, 8), 3.5)"))
    msg = load_error(path).message
    assert "element 1" in msg and "float" in msg


def test_input_not_on_cpu(tmp_path):
    path = write(tmp_path, GOOD.replace("torch.randn(2, 8)", "torch.randn(2, 8, device='meta')"))
    msg = load_error(path).message
    assert "input 0" in msg and "meta" in msg


def test_meta_parameters_and_buffers_load_but_do_not_run(tmp_path):
    """Meta tensors are shapes without values (a model too large to make here, built with
    --weights external, see test_meta_weights.py): loaded, not run eagerly."""
    path = write(
        tmp_path,
        GOOD.replace("return Net()", "n = Net().to('meta')\n"
                     "    n.register_buffer('scale', torch.ones(1, device='meta'))\n    return n"),
    )
    model, inputs = load_model_file(path)
    assert model.lin.weight.is_meta and model.scale.is_meta
    assert run_eager(model, inputs) is None


# --- run_eager ---------------------------------------------------------------------


def test_run_eager_wraps_forward_error_with_model_line(tmp_path):
    path = write(tmp_path, GOOD.replace("torch.randn(2, 8)", "torch.randn(2, 7)"))
    model, inputs = load_model_file(path)
    with pytest.raises(ModelFileError) as info:
        run_eager(model, inputs)
    msg = info.value.message
    assert msg.startswith(f"model file {path.resolve()}: the model fails on its own example inputs: RuntimeError")
    assert "return torch.relu(self.lin(x))" in msg and "\n" not in msg


def test_run_eager_with_library_module():
    with pytest.raises(ModelFileError) as info:
        run_eager(nn.Sequential(nn.Linear(3, 2)), (torch.randn(1, 4),))
    assert "fails on its own example inputs" in info.value.message


def test_run_eager_runs_without_grad():
    out = run_eager(nn.Linear(3, 2), (torch.randn(1, 3),))
    assert out.shape == (1, 2) and not out.requires_grad


def test_input_names_follow_forward():
    from aotcombo.builder.inputs.signature import input_names

    class Named(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None, *rest):
            return input_ids

    class Packed(torch.nn.Module):
        def forward(self, x, *xs):
            return x

    class Keywords(torch.nn.Module):
        def forward(self, x, **options):
            return x

    assert input_names(Named(), 2) == ("input_ids", "attention_mask")
    assert input_names(Named(), 4) == ("input_ids", "attention_mask", "rest[0]", "rest[1]")
    assert input_names(Packed(), 3) == ("x", "xs[0]", "xs[1]")
    assert input_names(Keywords(), 2) == ("x", "input1")  # more inputs than forward names
    assert input_names(torch.nn.Linear(2, 2), 1) == ("input",)
