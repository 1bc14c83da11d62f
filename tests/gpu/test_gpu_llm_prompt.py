"""One package for Llama 3.2 1B's prompts of any length and the decode steps after them
(``full_llama_1b_prompt``: sample_models/full_size/llama_1b_prompt.py built with ``--dynamic
seq=1:2304 --weights external``), against eager on the GPU, graph mode and op by op.

Prompts of 1, 17, 128, 500 and 2048 tokens, each from an empty cache, then 16 decode steps
through the same package, the package fed eager's tokens (teacher-forced): at every step the
package's next token is eager's unless the two are a bf16 tie (eager's logit for the package's
token within twice the largest logit difference the two show at that step); the logits of the
prompt's last position and of every step, and the cache after the steps, within max(1e-2,
2 x eager's own error) in relative L2, both against eager in fp32.
"""

import pytest
import torch

from aotcombo.testing.compare import relative_error
from aotcombo.testing.gpu import import_package
from aotcombo.testing.zoo import FULL_SIZE_DIR, model_file

pytestmark = pytest.mark.gpu
LENGTHS = (1, 17, 128, 500, 2048)
STEPS = 16


@pytest.fixture(scope="module")
def llama():
    source = model_file("llama_1b_prompt", FULL_SIZE_DIR)
    eager = source.get_model(device="cuda")
    reference = source.get_model(dtype=torch.float32, device="cuda")  # its cache holds its tensors itself
    reference.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in eager.state_dict().items()})
    return source, eager, reference, import_package("full_llama_1b_prompt")


def _is_tie(eager_logits, ours_logits) -> bool:
    mine = int(ours_logits.argmax())
    noise = float((ours_logits.float() - eager_logits.float()).abs().max())
    return float(eager_logits.max() - eager_logits[mine]) <= 2 * noise


@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "op_by_op"])
def test_prompts_of_any_length_then_decode_match_eager(llama, graphs):
    source, eager, reference, package = llama
    ours = package.load("cuda", graphs=graphs, weights=eager.state_dict())
    cache = set(ours.state())  # the cache's tensors, by the model's names (not the rotary frequencies)
    for length in LENGTHS:  # each prompt from an empty cache, every side
        for buffer in [*ours.state().values(), *(b for m in (eager, reference) for name, b in m.named_buffers()
                                                 if name in cache)]:
            buffer.zero_()
        ids, positions = (t.cuda() for t in source.get_prompt_inputs(length, seed=length))
        worst = worst_eager = 0.0
        ties = []
        with torch.no_grad():
            for step in range(STEPS + 1):
                e, o, r = (m(ids, positions)[:, -1].float() for m in (eager, ours, reference))
                worst, worst_eager = max(worst, relative_error(o, r)), max(worst_eager, relative_error(e, r))
                if int(o.argmax()) != int(e.argmax()):
                    assert _is_tie(e[0], o[0]), f"prompt {length}, step {step}: the package's token is no tie"
                    ties.append(step)
                ids, positions = e.argmax(-1, keepdim=True), positions[-1:] + 1
        fp32, theirs = dict(reference.named_buffers()), dict(eager.named_buffers())
        floating = [k for k, v in ours.state().items() if v.is_floating_point()]
        error = max(relative_error(ours.state()[k], fp32[k]) for k in floating)
        error_eager = max(relative_error(theirs[k], fp32[k]) for k in floating)
        line = (f"graphs={graphs} prompt {length}: {STEPS + 1 - len(ties)}/{STEPS + 1} tokens equal, ties {ties}; "
                f"logits vs fp32 {worst:.2e} (eager {worst_eager:.2e}); cache {error:.2e} (eager {error_eager:.2e})")
        print(line)
        assert worst <= max(1e-2, 2 * worst_eager), line
        assert error <= max(1e-2, 2 * error_eager), line
        counters = [k for k, v in ours.state().items() if not v.is_floating_point()]  # the layers' lengths
        assert all(torch.equal(ours.state()[k], theirs[k]) for k in counters), line
