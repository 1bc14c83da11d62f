"""Tensor-parallel packages on two GPUs of one host (``build --tensor-parallel 2``), each checked
against eager by ``tensor_parallel_worker.py`` under ``torchrun --nproc-per-node 2``: the Llama 3.2
1B and Llama 3 8B decode steps (logits, cache and 64 greedy tokens) and the 1B prompt package
(``--dynamic seq``: prompts of 512 and 37 tokens, then decode steps). Skipped with fewer than 2 GPUs.

    aotcombo build sample_models/full_size/llama_1b_decode.py --tensor-parallel 2 --weights external \\
        --arch sm_90 --name full_llama_1b_decode_tp2
    aotcombo build sample_models/full_size/llama_8b_decode.py --tensor-parallel 2 --weights external \\
        --arch sm_90 --name full_llama_8b_decode_tp2
    aotcombo build sample_models/full_size/llama_1b_prompt.py --tensor-parallel 2 --dynamic seq=1:2304 \\
        --inputs-fn get_prompt_inputs --weights external --arch sm_90 --name full_llama_1b_prompt_tp2
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aotcombo.testing.gpu import import_package

pytestmark = pytest.mark.gpu
WORLD = 2
WORKER = Path(__file__).with_name("tensor_parallel_worker.py")


@pytest.mark.parametrize("model, mode", [("llama_1b_decode", "decode"), ("llama_1b_prompt", "prompt"),
                                         ("llama_8b_decode", "decode")])
def test_tensor_parallel_matches_eager(model, mode):
    pytest.importorskip("transformers")
    if torch.cuda.device_count() < WORLD:
        pytest.skip(f"tensor parallel over {WORLD} GPUs; {torch.cuda.device_count()} here")
    package = f"full_{model}_tp{WORLD}"
    import_package(package)  # skips (or fails, AOTCOMBO_REQUIRE_PACKAGES=1) when not installed
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={WORLD}", str(WORKER),
               model, package, mode]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
