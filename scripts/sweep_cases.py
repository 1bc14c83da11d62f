"""The cases ``model_sweep.py`` builds: small configs of real models (transformers, timm,
torchvision) and constructs (RNNs, attention modules, FFT, weight norm, ...), each a (model
maker, example inputs maker) pair, random weights and inputs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


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

