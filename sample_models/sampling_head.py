"""An LLM's sampling head on the GPU: the next token ids from a decode step's logits, with no host
sync. Repetition penalty over the tokens so far (gather, scatter), temperature, top-k, top-p
(sort, a cumulative sum over the whole vocabulary, scatter back) and Gumbel-max sampling with the
noise given as an input, so that a run is reproducible and comparable with eager.

    aotcombo build sample_models/sampling_head.py --batch 1,16 --out dist/

A vocabulary of 128256 (Llama 3's) makes Inductor scan each row in blocks (a split scan: its
blocks hand their sums on through a workspace zeroed before each call).
"""

import torch

VOCAB = 128256
HISTORY = 32  # tokens so far, penalised


class SamplingHead(torch.nn.Module):
    def __init__(self, penalty: float = 1.2, temperature: float = 0.7, top_k: int = 50, top_p: float = 0.9):
        super().__init__()
        self.penalty, self.temperature, self.top_k, self.top_p = penalty, temperature, top_k, top_p

    def forward(self, logits, noise, previous):
        score = torch.gather(logits, 1, previous)
        score = torch.where(score < 0, score * self.penalty, score / self.penalty)
        logits = logits.scatter(1, previous, score) / self.temperature
        kth = torch.topk(logits, self.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
        ordered, order = torch.sort(logits, descending=True, dim=-1)
        beyond = ordered.softmax(-1).cumsum(-1) > self.top_p
        beyond = torch.cat([torch.zeros_like(beyond[:, :1]), beyond[:, :-1]], dim=1)  # keep the first past p
        logits = logits.masked_fill(beyond.scatter(1, order, beyond), float("-inf"))
        return torch.argmax(logits - torch.log(-torch.log(noise)), dim=-1)


def get_model():
    return SamplingHead().eval()


def get_example_inputs(batch: int = 2, vocab: int = VOCAB, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, vocab, generator=generator) * 4
    noise = torch.rand(batch, vocab, generator=generator).clamp(1e-6, 1 - 1e-6)
    previous = torch.randint(0, vocab, (batch, HISTORY), generator=generator)
    return logits, noise, previous
