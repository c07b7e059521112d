"""Tiny random image towers of each family (open_clip, Hugging Face vision) and a tiny space-time
ViT configuration, shared by the vision tests and their fixtures (tests/vision/conftest.py)."""

TINY_OPEN_CLIP = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}

# 4 frames of 32x32, 16-px patches, 2-frame tubelets: 2 x 2 x 2 = 8 tokens
TINY_VIT = dict(num_frames=4, image_size=32, patch_size=16, tubelet_size=2, width=32, depth=2,
                num_heads=2, mlp_ratio=2.0)

TINY_HF_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      image_size=32, patch_size=16)
