"""A Llama 3 8B decode step for eight sequences, each at its own position: ``sample_models/
llm_decode.py``'s decoder (a static cache for ``MAX_BATCH`` sequences, ``input_pos`` [batch, 1],
each row attending over its own positions only) at Llama-3-8B's shapes (32 layers, d 4096, 32
query heads sharing 8 key/value heads of 128, SwiGLU 14336, vocab 128256, rope theta 500000,
untied LM head; 16 GB of bf16 weights, a 1 GB cache of ``MAX_SEQ`` positions).

A server batches requests that sit at different points of their generation: one step serves them
all, reading the weights once. ``get_model()`` (the build's call) puts the parameters on the meta
device, so only ``--weights external`` builds it and the build never holds 16 GB; the cache's
zeros and the rotary tables are made on the CPU. ``get_model(device="cuda")`` makes the model with
random weights (seed 0) on the GPU, for the eager reference and ``load(weights=...)``::

    aotcombo build sample_models/full_size/llama_8b_batch.py --weights external --arch sm_90 \\
        --no-pdl --name full_llama_8b_batch

``--no-pdl``: on an H100 the step took 6.31 ms without programmatic dependent launch, 6.86 ms
with it (benchmarks/llm_batch_bench.py); its linears of eight rows run on the tensor cores in one
wave of 128 to 448 programs, and a batch of one (GEMVs of 528 programs or more) gains from it.
"""

import importlib.util
import math
from pathlib import Path

import torch
from _wrappers import default_dtype, parameters_on_meta


def _sample():
    path = Path(__file__).resolve().parents[1] / "llm_decode.py"
    spec = importlib.util.spec_from_file_location("llm_decode_for_8b", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


llm_decode = _sample()
BATCH, MAX_SEQ = 8, 1024
SHAPE = llm_decode.Shape(vocab=128256, dim=4096, layers=32, heads=32, kv_heads=8, hidden=14336,
                         max_batch=BATCH, max_seq=MAX_SEQ, rope_theta=500000.0)


def get_model(device="meta"):
    """``device="meta"``: parameters on the meta device (the build's model). Another device: random
    weights there from the start, each matrix N(0, 1 / fan_in), norms ones, in bf16."""
    torch.manual_seed(0)
    meta = torch.device(device).type == "meta"
    with (parameters_on_meta() if meta else torch.device(device)), default_dtype(llm_decode.DTYPE):
        model = llm_decode.Decoder(SHAPE)
    if not meta:
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() > 1:
                    p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]))
    model.rope_cos, model.rope_sin = model.rope_cos.float(), model.rope_sin.float()  # rotary angles stay fp32
    return model.eval()


def get_example_inputs(seed=0, positions=None):
    """A decode step of ``BATCH`` sequences: row i's token at its own position (by default
    5 + 127 i: 5 to 894)."""
    g = torch.Generator().manual_seed(seed)
    positions = [5 + 127 * i for i in range(BATCH)] if positions is None else positions
    return (torch.randint(0, SHAPE.vocab, (BATCH, 1), generator=g),
            torch.tensor(positions, dtype=torch.int64).view(BATCH, 1))
