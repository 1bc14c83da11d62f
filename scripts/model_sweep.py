"""Build models users bring (beyond the zoo) and check each against eager under the interpreter.

    .venv/bin/python scripts/model_sweep.py [CASE ...] [--out sweep.jsonl]
    .venv/bin/python scripts/model_sweep.py [CASE ...] --wheels .carry/sweep --no-interpret   (for the GPU)
    .venv/bin/python scripts/model_sweep.py --dynamic [CASE ...]   (token cases: a dynamic batch and length)

Each case is a small config of a real model (transformers, timm, torchvision) or a construct
(RNNs, attention modules, FFT, weight norm, ...) with random weights and inputs. It is built
for sm_90 and its interpreted program is compared with eager on other inputs of the same
shapes: one JSON line per case with the launches per forward, the extern ops, the largest
relative L2 error over the outputs, or the error that stopped it. This is how the 2026-11-25
sweeps found a boolean-mask bug (Falcon), layouts of convolution outputs (SegFormer), CPU
literals (DeBERTa), OrderedDict outputs (torchvision segmentation), tiled persistent
reductions (MaxViT) and transformers' use_cache default (Phi-3, Mixtral: an error naming the fix);
the 2026-12-03 sweep (25 more: encoders, speech, LLMs, MoE, timm and torchvision vision models) found no
wrong result, only an error to improve (a mask passed by position into GPT-Neo's cache); the 2026-12-05
sweep (34 small configs, 7 of them new here: XLM-R, GPT-Neo, CodeGen, Qwen3-MoE, DeiT, AST, CLIP's text
model) found no wrong result and no failure but the use_cache default, whose error names the fix; the
2026-12-05 sweep with --dynamic (the 33 token cases of one or two inputs, each built once for a batch of
1-4 and a length of 1-32, checked at 8 sizes with padded masks) found no wrong result; three models do
not allow every length in one trace (MobileBERT takes a length of 2 apart, Funnel and Mamba loop over the
length in Python), whose error now names the model's line and the range that builds
(trace/axis_errors.py), and a rewrite of ours that assumed the example's token count (Qwen2-MoE:
linear/match.py, caught since by trace/specialization.py); with a dynamic batch, 40 of the 41 cases of
float inputs match eager at batches 1, 3 and 4, CaiT after a fix (a fused linear's rows under a
[batch, 1, k] view: linear/lowering.row_stride), and all 41 since DETR's fix (torch's decomposition of
nearest upsampling guarded on its pixel mask's channel dim, there the batch: trace/layout_guards.py;
refused above 3 before). The cases that earned a place are now zoo models (sample_models/zoo/),
checked on the GPU. No GPU needed; a few minutes per large vision model (the interpreter is slow).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils import _pytree

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # aotcombo and aotcombo.testing from this checkout

from aotcombo.testing.compare import relative_error  # noqa: E402


def hf(config: str, model: str, **fields):
    def make():
        import transformers

        return getattr(transformers, model)(getattr(transformers, config)(**fields)).eval()

    return make


def timm_model(name: str, **kwargs):
    return lambda: __import__("timm").create_model(name, pretrained=False, **kwargs).eval()


def tv(path: str, **kwargs):
    def make():
        import torchvision

        builder = torchvision.models
        for part in path.split("."):
            builder = getattr(builder, part)
        return builder(weights=None, **kwargs).eval()

    return make


def tokens(batch=2, seq=16, vocab=100, mask=True):
    def make():
        ids = torch.randint(0, vocab, (batch, seq))
        return (ids, torch.ones(batch, seq, dtype=torch.int64)) if mask else (ids,)

    return make


def images(size=64, batch=2, channels=3):
    return lambda: (torch.randn(batch, channels, size, size),)


class LSTMHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm, self.head = nn.LSTM(16, 32, num_layers=2, batch_first=True), nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.lstm(x)[0][:, -1])


class BiGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(16, 32, batch_first=True, bidirectional=True)

    def forward(self, x):
        return self.gru(x)[0]


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


class Upsampler(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.shuffle = nn.ConvTranspose2d(8, 8, 4, stride=2, padding=1), nn.PixelShuffle(2)
        self.conv = nn.Conv2d(2, 3, 3, padding=1)

    def forward(self, x, grid):
        y = self.conv(self.shuffle(torch.relu(self.up(x))))
        y = F.interpolate(y, scale_factor=0.5, mode="bicubic", align_corners=False)
        return F.grid_sample(y, grid, align_corners=False)


class Constructs(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16, padding_idx=0)
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(16, 16, 3, padding=1))

    def forward(self, ids, x):
        y = self.conv(self.emb(ids).transpose(1, 2)).transpose(1, 2)
        top, index = torch.topk(y, 3, dim=-1)
        ranked = torch.sort(x, dim=-1, descending=True)[0]
        running = torch.cumsum(ranked, -1) / torch.arange(1, x.shape[-1] + 1, device=x.device)
        scores = torch.einsum("btd,bsd->bts", y, y).softmax(-1)
        patches = F.unfold(x.view(x.shape[0], 1, 8, 8), 3, padding=1)
        buckets = torch.bucketize(x, torch.linspace(-2, 2, 9, device=x.device))
        return top.sum(-1) + index.float().mean(-1), running, scores, patches, buckets


class FFTReal(nn.Module):
    def forward(self, x):
        return torch.fft.fft2(x).real


S = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
DEC = dict(S, num_key_value_heads=2)  # decoder-only LLMs: grouped key/value heads

CASES = {
    "transformer_encoder": (lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2,
                                                          enable_nested_tensor=False).eval(),
                            lambda: (torch.randn(2, 10, 32),)),
    "multihead_attention": (lambda: SelfAttention().eval(), lambda: (torch.randn(2, 10, 32),)),
    "lstm": (lambda: LSTMHead().eval(), lambda: (torch.randn(2, 12, 16),)),
    "gru_bidirectional": (lambda: BiGRU().eval(), lambda: (torch.randn(2, 12, 16),)),
    "upsampler": (lambda: Upsampler().eval(), lambda: (torch.randn(2, 8, 8, 8), torch.rand(2, 8, 8, 2) * 2 - 1)),
    "constructs": (lambda: Constructs().eval(), lambda: (torch.randint(0, 50, (2, 12)), torch.randn(2, 64))),
    "fft": (lambda: FFTReal().eval(), lambda: (torch.randn(2, 8, 8),)),
    "tv_vit": (lambda: __import__("torchvision").models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10).eval(),
               images(32)),
    "shufflenet": (tv("shufflenet_v2_x0_5", num_classes=10), images()),
    "densenet121": (tv("densenet121", num_classes=10), images()),
    "squeezenet": (tv("squeezenet1_1", num_classes=10), images()),
    "regnet": (tv("regnet_y_400mf", num_classes=10), images()),
    "googlenet": (tv("googlenet", num_classes=10, aux_logits=False, init_weights=True), images()),
    "r3d_18": (tv("video.r3d_18", num_classes=10), lambda: (torch.randn(1, 3, 4, 32, 32),)),
    "deeplabv3_aux": (tv("segmentation.deeplabv3_mobilenet_v3_large", num_classes=5, aux_loss=True,
                         weights_backbone=None), images()),
    "fcn": (tv("segmentation.fcn_resnet50", num_classes=5, aux_loss=False, weights_backbone=None), images(batch=1)),
    "distilbert": (hf("DistilBertConfig", "DistilBertModel", vocab_size=100, dim=32, n_layers=2, n_heads=2,
                      hidden_dim=64), tokens()),
    "roberta": (hf("RobertaConfig", "RobertaModel", vocab_size=100, hidden_size=32, num_hidden_layers=2,
                   num_attention_heads=2, intermediate_size=64, max_position_embeddings=40), tokens()),
    "albert": (hf("AlbertConfig", "AlbertModel", vocab_size=100, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                  num_attention_heads=2, intermediate_size=64, max_position_embeddings=40), tokens()),
    "opt": (hf("OPTConfig", "OPTModel", vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
               ffn_dim=64, max_position_embeddings=40, word_embed_proj_dim=32, use_cache=False), tokens()),
    "gptj": (hf("GPTJConfig", "GPTJModel", vocab_size=100, n_embd=32, n_layer=2, n_head=4, rotary_dim=4,
                n_positions=64, use_cache=False), tokens(mask=False)),
    "mistral": (hf("MistralConfig", "MistralModel", vocab_size=100, hidden_size=32, intermediate_size=64,
                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, sliding_window=8,
                   use_cache=False, attn_implementation="sdpa"), tokens()),
    "gemma2": (hf("Gemma2Config", "Gemma2Model", vocab_size=100, hidden_size=32, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=8,
                  use_cache=False, attn_implementation="eager"), tokens(mask=False)),
    "t5": (hf("T5Config", "T5ForConditionalGeneration", vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2,
              num_heads=4, relative_attention_num_buckets=8, use_cache=False, decoder_start_token_id=0),
           lambda: (torch.randint(0, 100, (2, 12)), torch.ones(2, 12, dtype=torch.int64),
                    torch.randint(0, 100, (2, 6)))),
    "clip": (hf("CLIPConfig", "CLIPModel", projection_dim=16,
                text_config=dict(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=64, max_position_embeddings=20),
                vision_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                   image_size=32, patch_size=8)),
             lambda: (torch.randint(0, 100, (2, 10)), torch.randn(2, 3, 32, 32))),
    "wav2vec2": (hf("Wav2Vec2Config", "Wav2Vec2Model", hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                    num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, feat_extract_norm="group",
                    mask_time_prob=0.0), lambda: (torch.randn(2, 800),)),
    "dinov2": (hf("Dinov2Config", "Dinov2Model", hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=64, image_size=56, patch_size=14), images(70)),
    "levit": (timm_model("levit_128s", num_classes=10, img_size=64), images()),
    "beit": (timm_model("beit_base_patch16_224", num_classes=10, img_size=32, patch_size=8, embed_dim=32, depth=2,
                        num_heads=2), images(32)),
    "xcit": (timm_model("xcit_nano_12_p16_224", num_classes=10, img_size=64), images()),
    "phi3": (hf("Phi3Config", "Phi3Model", vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, use_cache=False), tokens()),
    # forward(input_ids, past_key_values, attention_mask, ...): the ids alone by position
    "gpt_bigcode": (hf("GPTBigCodeConfig", "GPTBigCodeModel", vocab_size=100, n_embd=32, n_layer=2, n_head=4,
                       multi_query=True, use_cache=False), tokens(mask=False)),
    "mamba": (hf("MambaConfig", "MambaModel", vocab_size=100, hidden_size=32, state_size=8, num_hidden_layers=2,
                 expand=2, conv_kernel=4, use_cache=False), tokens(mask=False)),
    "mixtral": (hf("MixtralConfig", "MixtralModel", vocab_size=100, hidden_size=32, intermediate_size=64,
                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                   num_experts_per_tok=2, use_cache=False), tokens()),
    "llama_seq_cls": (hf("LlamaConfig", "LlamaForSequenceClassification", vocab_size=100, hidden_size=32,
                         intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         num_labels=3, pad_token_id=0, use_cache=False), tokens(mask=False)),
    "yolos": (hf("YolosConfig", "YolosModel", hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, image_size=[64, 64], patch_size=16, num_detection_tokens=5), images()),
    "convnextv2": (timm_model("convnextv2_atto", num_classes=10), images()),
    "efficientnetv2": (timm_model("tf_efficientnetv2_b0", num_classes=10), images()),
    "mobilenetv4": (timm_model("mobilenetv4_conv_small", num_classes=10), images()),
    "maxvit": (tv("maxvit_t", num_classes=10), images(size=224, batch=1)),
    "qwen3": (hf("Qwen3Config", "Qwen3Model", vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=8, use_cache=False), tokens()),
    "gemma3_text": (hf("Gemma3TextConfig", "Gemma3TextModel", vocab_size=100, hidden_size=32, intermediate_size=64,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                       sliding_window=8, use_cache=False), tokens()),
    "modernbert": (hf("ModernBertConfig", "ModernBertModel", vocab_size=100, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, local_attention=8, global_attn_every_n_layers=2,
                      pad_token_id=0), tokens()),
    "siglip_vision": (hf("SiglipVisionConfig", "SiglipVisionModel", hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, image_size=32, patch_size=8), images(size=32)),
    "eva02": (timm_model("eva02_tiny_patch14_224", num_classes=10, img_size=56), images(size=56)),
    "fastvit": (timm_model("fastvit_t8", num_classes=10), images()),
    "pvt_v2": (timm_model("pvt_v2_b0", num_classes=10), images()),
    "detr": (hf("DetrConfig", "DetrForObjectDetection", use_timm_backbone=False, use_pretrained_backbone=False,
                backbone_config={"model_type": "resnet", "depths": [1, 1, 1, 1], "hidden_sizes": [16, 32, 64, 128],
                                 "embedding_size": 16},
                d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=10), images(batch=1)),
    # a 2026-12-03 sweep (transformers 5.24, timm 1.0.31, torchvision 0.29): each built and matched eager
    "electra": (hf("ElectraConfig", "ElectraModel", embedding_size=16, **S), tokens()),
    "mobilebert": (hf("MobileBertConfig", "MobileBertModel", vocab_size=100, hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=64, embedding_size=16, intra_bottleneck_size=16,
                      true_hidden_size=16, num_feedforward_networks=2), tokens()),
    "mpnet": (hf("MPNetConfig", "MPNetModel", **S), tokens()),
    "funnel": (hf("FunnelConfig", "FunnelModel", vocab_size=100, d_model=32, n_head=4, d_head=8, d_inner=64,
                  block_sizes=[1, 1]), tokens()),
    "squeezebert": (hf("SqueezeBertConfig", "SqueezeBertModel", vocab_size=100, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=64, embedding_size=32), tokens()),
    "deberta": (hf("DebertaConfig", "DebertaModel", **S), tokens()),
    "convbert": (hf("ConvBertConfig", "ConvBertModel", embedding_size=32, **S), tokens()),
    "marian": (hf("MarianConfig", "MarianMTModel", vocab_size=100, d_model=32, encoder_layers=1, decoder_layers=1,
                  encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                  decoder_start_token_id=0, pad_token_id=1, use_cache=False),
               lambda: (torch.randint(2, 100, (2, 12)), torch.ones(2, 12, dtype=torch.int64),
                        torch.randint(2, 100, (2, 7)))),
    "hubert": (hf("HubertConfig", "HubertModel", hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                  num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2), lambda: (torch.randn(2, 1600),)),
    "wavlm": (hf("WavLMConfig", "WavLMModel", hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                 num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2), lambda: (torch.randn(2, 1600),)),
    "swinv2_hf": (hf("Swinv2Config", "Swinv2Model", image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                     num_heads=[2, 2], window_size=4), images(size=32)),
    "poolformer": (hf("PoolFormerConfig", "PoolFormerModel", hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1]),
                   images()),
    "olmo2": (hf("Olmo2Config", "Olmo2Model", use_cache=False, **DEC), tokens()),
    "stablelm": (hf("StableLmConfig", "StableLmModel", use_cache=False, **DEC), tokens()),
    "starcoder2": (hf("Starcoder2Config", "Starcoder2Model", use_cache=False, **DEC), tokens()),
    "granite": (hf("GraniteConfig", "GraniteModel", use_cache=False, **DEC), tokens()),
    "cohere": (hf("CohereConfig", "CohereModel", use_cache=False, **DEC), tokens()),
    "qwen2_moe": (hf("Qwen2MoeConfig", "Qwen2MoeModel", use_cache=False, num_experts=4, num_experts_per_tok=2,
                     moe_intermediate_size=32, shared_expert_intermediate_size=32, **DEC), tokens()),
    "timm_cait": (timm_model("cait_xxs24_224", num_classes=10, img_size=32, patch_size=8, depth=2,
                             depth_token_only=1), images(size=32)),
    "timm_ghostnet": (timm_model("ghostnet_050", num_classes=10), images()),
    "timm_repvgg": (timm_model("repvgg_a0", num_classes=10), images()),
    "timm_hrnet": (timm_model("hrnet_w18_small", num_classes=10), images()),
    "timm_efficientvit": (timm_model("efficientvit_b0", num_classes=10), images()),
    "tv_swin_v2": (tv("swin_v2_t", num_classes=10), images(size=64, batch=1)),
    "tv_mnasnet": (tv("mnasnet0_5", num_classes=10), images()),
    # a 2026-12-05 sweep (transformers 5.25): each built and matched eager
    "xlm_roberta": (hf("XLMRobertaConfig", "XLMRobertaModel", max_position_embeddings=40, **S), tokens()),
    "gpt_neo": (hf("GPTNeoConfig", "GPTNeoModel", vocab_size=100, hidden_size=32, num_layers=2, num_heads=4,
                   attention_types=[[["global", "local"], 1]], window_size=8, use_cache=False,
                   attn_implementation="eager"), tokens(mask=False)),
    "codegen": (hf("CodeGenConfig", "CodeGenModel", vocab_size=100, n_embd=32, n_layer=2, n_head=4, rotary_dim=4,
                   use_cache=False), tokens(mask=False)),
    "qwen3_moe": (hf("Qwen3MoeConfig", "Qwen3MoeModel", use_cache=False, head_dim=8, num_experts=4,
                     num_experts_per_tok=2, moe_intermediate_size=32, **DEC), tokens(mask=False)),
    "deit": (hf("DeiTConfig", "DeiTModel", image_size=32, patch_size=8, **S), images(size=32)),
    "audio_spectrogram": (hf("ASTConfig", "ASTModel", max_length=64, num_mel_bins=32, patch_size=16,
                             frequency_stride=10, time_stride=10, **S), lambda: (torch.randn(2, 64, 32),)),
    "clip_text": (hf("CLIPTextConfig", "CLIPTextModel", max_position_embeddings=20, **S), tokens()),
}


def output_errors(got, ref) -> list[float]:
    """The relative L2 error of each floating output; raises on an all-zero eager output (the
    comparison would prove nothing: ``aotcombo.testing.compare``)."""
    if isinstance(ref, dict):  # a transformers ModelOutput comes back as a dict
        ref = dict(ref)
    return [relative_error(g, r) for g, r in zip(_pytree.tree_leaves(got), _pytree.tree_leaves(ref))
            if isinstance(r, torch.Tensor) and r.is_floating_point()]


DYNAMIC = {"batch": (1, 4), "seq": (1, 32)}  # --dynamic: the ranges of token cases' axes
# (batch, seq): the range ends, primes, off-by-one lengths and the example's own (2, 16)
DYNAMIC_SIZES = ((1, 1), (4, 32), (2, 16), (3, 7), (1, 31), (2, 17), (4, 2), (3, 29))


def token_case(inputs) -> bool:
    """Inputs of token ids and a mask (``tokens()``): a batch and a sequence axis a user varies
    (not a seq2seq model's decoder ids, a sequence axis of their own)."""
    return len(inputs) <= 2 and all(t.dtype == torch.int64 and t.dim() == 2 for t in inputs)


def padded_tokens(inputs, batch: int, seq: int, seed: int):
    """Fresh ids (and mask) of ``inputs``' kind at ``batch`` x ``seq``, each row but the first
    padded after a length of its own, as a tokenizer pads a batch."""
    g = torch.Generator().manual_seed(seed)
    vocab = int(inputs[0].max()) + 1
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    if len(inputs) == 1:
        return (ids,)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    for b in range(1, batch):
        mask[b, int(torch.randint(1, seq + 1, (1,), generator=g)):] = 0
    return ids, mask


def _dynamic_axes(model, inputs) -> dict:
    """Every token input's dims 0 and 1 named batch and seq, keyed by forward's parameter names."""
    import inspect

    names = list(inspect.signature(model.forward).parameters)[:len(inputs)]
    return {name: {0: "batch", 1: "seq"} for name in names}


def _made(name: str):
    """The case's model and example inputs, seeded; zero-initialised heads (torchvision's ViT)
    would make every output zero: they get random weights."""
    make_model, make_inputs = CASES[name]
    torch.manual_seed(0)
    model, example = make_model(), make_inputs()
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() >= 2 and not parameter.any():
                parameter.normal_(0.0, 0.02)
    return model, example


def _failed(name: str, exc: BaseException) -> dict:
    return {"case": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:800],
            "where": traceback.format_exc().splitlines()[-3:]}


def check_dynamic(name: str, out: Path) -> dict:
    """Build a token case with ``DYNAMIC`` ranges over its batch and sequence axes and compare
    its interpreted program with eager at ``DYNAMIC_SIZES`` (padded masks): one program for
    every size (and the few-token one where a call is in it). A case of float inputs: a dynamic
    batch alone (dim 0), checked at batches 1, 3 and 4."""
    from aotcombo.builder.pipeline import build_package
    from aotcombo.runtime.manifest import Dynamic
    from aotcombo.tools import interpret

    start = time.perf_counter()
    try:
        model, example = _made(name)
        tokens = token_case(example)
        if not tokens and not all(t.is_floating_point() for t in example):
            return {"case": name, "ok": True, "skipped": "neither token ids nor float inputs"}
        shapes, axes = (Dynamic(**DYNAMIC), _dynamic_axes(model, example)) if tokens else \
            (Dynamic(batch=DYNAMIC["batch"]), None)  # dim 0 of every input
        result = build_package(model, example, arch=["sm_90"], name=f"sweep_{name}_dyn", out=out / name,
                               cache=True, shapes=shapes, dynamic_axes=axes)
        errors = {}
        for batch, seq in DYNAMIC_SIZES if tokens else ((1, None), (3, None), (4, None)):
            gen = torch.Generator().manual_seed(batch)
            inputs = padded_tokens(example, batch, seq, seed=100 * batch + seq) if tokens else \
                tuple(torch.randn((batch, *t.shape[1:]), generator=gen) for t in example)
            with torch.no_grad():
                ref = model(*inputs)
            tokens_in = batch * seq if tokens else None  # the few-token program: token calls that fit it
            variants = [0] + [i for i, v in enumerate(result.variants) if v.max_tokens and tokens_in
                              and tokens_in <= v.max_tokens]
            errors[f"{batch}x{seq}" if tokens else f"batch {batch}"] = max(
                max(output_errors(interpret.run_variant(result, v, inputs), ref)) for v in variants)
        worst = max(errors.values())
        return {"case": name, "ok": worst <= 1e-4, "max_error": worst, "errors": errors,
                "programs": len(result.variants), "seconds": round(time.perf_counter() - start, 1)}
    except Exception as exc:  # noqa: BLE001 - a sweep records every failure and goes on
        return _failed(name, exc)


def check(name: str, out: Path, interpret_check: bool = True) -> dict:
    """Build one case into ``out / name`` and, with ``interpret_check``, compare its interpreted
    program with eager. ``out / name / expected.pt`` keeps other inputs and eager's outputs for
    them (CPU, float32): what tests/gpu/test_gpu_sweep.py checks the wheel against on a GPU."""
    from aotcombo.builder.pipeline import build_package
    from aotcombo.tools import interpret

    make_inputs = CASES[name][1]
    start = time.perf_counter()
    try:
        model, example = _made(name)
        result = build_package(model, example, arch=["sm_90"], name=f"sweep_{name}", out=out / name, cache=True)
        inputs = make_inputs()
        with torch.no_grad():
            ref = model(*inputs)
        if isinstance(ref, dict):  # a transformers ModelOutput: the package returns a dict
            ref = dict(ref)
        row = {"case": name, "launches": result.summary()["launches_per_forward"],
               "extern_ops": list(result.manifest.extern_ops)}
        if interpret_check:
            errors = output_errors(interpret.run_variant(result, 0, [t.clone() for t in inputs]), ref)
            row.update(ok=bool(errors) and max(errors) <= 1e-4, max_error=max(errors, default=None))
        else:
            output_errors(ref, ref)  # refuses an all-zero eager output
            row.update(ok=True, built_only=True)
        leaves = [t for t in _pytree.tree_leaves(ref) if isinstance(t, torch.Tensor)]  # no library classes
        torch.save({"inputs": list(inputs), "outputs": leaves}, out / name / "expected.pt")
        return {**row, "seconds": round(time.perf_counter() - start, 1)}
    except Exception as exc:  # noqa: BLE001 - a sweep records every failure and goes on
        return _failed(name, exc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="*", default=list(CASES), help=f"some of: {', '.join(CASES)}")
    parser.add_argument("--out", type=Path, help="also write the JSON lines here")
    parser.add_argument("--wheels", type=Path, metavar="DIR",
                        help="keep each case's wheels in DIR/CASE, with expected.pt (other inputs, eager's outputs) "
                        "for tests/gpu/test_gpu_sweep.py")
    parser.add_argument("--dynamic", action="store_true",
                        help="token cases built with a dynamic batch (1-4) and sequence length (1-32), checked at 8 "
                        "sizes with padded masks; float cases with a dynamic batch, checked at 3")
    parser.add_argument("--no-interpret", action="store_true",
                        help="build only (with --wheels: for the GPU check); no comparison under the interpreter")
    args = parser.parse_args()
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s): {', '.join(unknown)}")
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory(prefix="aotcombo-sweep-") as tmp:
        for name in args.cases:
            if args.dynamic:
                rows.append(check_dynamic(name, args.wheels or Path(tmp)))
            else:
                rows.append(check(name, args.wheels or Path(tmp), interpret_check=not args.no_interpret))
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    failed = [r["case"] for r in rows if not r["ok"]]
    verdict = "built" if args.no_interpret else "match eager"
    print(f"{len(rows) - len(failed)} of {len(rows)} {verdict}; failed: {', '.join(failed) or 'none'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
