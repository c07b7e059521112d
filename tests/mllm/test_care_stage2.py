"""CaRe stage II / E5-V as a plain module on a tiny random Qwen2-VL: training batches embed as the
embedder does, a torch loop trains the LLM and leaves the vision tower bit-identical, LoRA sits
on the LLM only and merges exactly."""

from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F

from vlr_plugins.losses import SupervisedSimCSELoss
from vlr_plugins.mllm import EOLEmbedder, EOLTripletsDataset, RetrievalAdaptation, collate_eol_triplets

pytest.importorskip("transformers")
pytest.importorskip("torchvision")
from _tiny_mllm import save_tiny_qwen2vl, write_nli_csv  # noqa: E402

@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return str(save_tiny_qwen2vl(tmp_path_factory.mktemp("tiny_qwen2vl"), seed=1))


@pytest.fixture(scope="module")
def nli_csv(tmp_path_factory):
    return write_nli_csv(tmp_path_factory.mktemp("nli") / "nli.csv")


def snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_training_batches_embed_exactly_as_the_embedder_does(tiny_folder, nli_csv):
    embedder = EOLEmbedder(tiny_folder, prompt="care", max_text_tokens=32)
    data = EOLTripletsDataset(nli_csv, tiny_folder, prompt="care", max_text_tokens=32)
    items = [data[i] for i in range(3)]
    batch = collate_eol_triplets(items)
    assert batch["input_ids"].shape[0] == 9 and batch["num_anchors"] == 3
    model = RetrievalAdaptation(embedder=embedder)
    model.eval()
    with torch.no_grad():
        emb = F.normalize(model(**batch, mode="tensor").float(), dim=-1)
    sentences = [s for j in range(3) for s in (data.triplets[i][j] for i in range(3))]
    torch.testing.assert_close(emb, embedder.encode_text(sentences), atol=1e-5, rtol=0)
    # the rows are the embedder's own prompts, tokenized
    ids = embedder.inputs("text", [data.triplets[0].sent0])["input_ids"][0].tolist()
    assert items[0]["ids"][0] == ids


def test_a_torch_loop_trains_the_llm_and_leaves_the_vision_tower_and_lm_head_alone(tiny_folder, nli_csv):
    model = RetrievalAdaptation(embedder=dict(type="EOLEmbedder", pretrained=tiny_folder, max_text_tokens=32))
    loss_fn = model.loss_fn
    assert type(loss_fn) is SupervisedSimCSELoss and loss_fn.temperature == 0.05, "eq. 4, tau 0.05 by default"
    hf = model.embedder.model
    assert not any(p.requires_grad for p in hf.model.visual.parameters())
    assert not hf.get_output_embeddings().weight.requires_grad, "the LM head is never used"
    assert model.training and not hf.model.visual.training, "the frozen tower stays in eval mode"
    data = EOLTripletsDataset(nli_csv, tiny_folder, prompt="care", max_text_tokens=32)
    before = snapshot(model)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for step in range(2):
        loss = model(**collate_eol_triplets([data[2 * step], data[2 * step + 1]]), mode="loss")["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = snapshot(model)
    vision = [k for k in before if ".visual." in k]
    assert vision and all(torch.equal(before[k], after[k]) for k in vision), "the vision tower must not change"
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert any("layers.0.self_attn.q_proj" in k for k in changed) and any("embed_tokens" in k for k in changed)
    model.eval().train()
    assert model.training and not hf.model.visual.training


def test_lora_sits_on_the_llm_only_and_merges_to_the_same_embeddings(tiny_folder):
    pytest.importorskip("peft")
    model = RetrievalAdaptation(embedder=EOLEmbedder(tiny_folder), finetune="lora",
                                lora=dict(r=4, lora_alpha=8, lora_dropout=0.0))
    lora = [k for k, p in model.named_parameters() if p.requires_grad]
    assert lora and all("lora_" in k for k in lora) and not any(".visual." in k for k in lora)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # trained adapters: lora_B away from its zero init
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    texts = ["a dog runs on the grass", "the red table"]
    model.eval()
    with_adapters = model.embedder.encode_text(texts)
    merged = model.merge_lora()
    assert merged is model.embedder.model and not any("lora_" in k for k in merged.state_dict())
    torch.testing.assert_close(model.embedder.encode_text(texts), with_adapters, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match=r"merge_lora: this model has no LoRA adapters \(finetune='full'\)"):
        model.merge_lora()


def test_what_it_refuses_names_the_module(tiny_folder):
    embedder = EOLEmbedder(tiny_folder)
    with pytest.raises(ValueError, match=r"RetrievalAdaptation: finetune must be one of \('full', 'lora'\), "
                                         r"found 'qlora'"):
        RetrievalAdaptation(embedder=embedder, finetune="qlora")
    model = RetrievalAdaptation(embedder=embedder, freeze_vision=False)
    assert all(p.requires_grad for p in model.embedder.model.model.visual.parameters())
    ids = torch.randint(0, 100, (5, 4))
    with pytest.raises(ValueError, match="RetrievalAdaptation: 5 rows for 2 sentences"):
        model(ids, torch.ones_like(ids), num_anchors=2)
    ids = torch.randint(0, 100, (4, 4))
    with pytest.raises(ValueError, match="mode must be 'loss', 'predict' or 'tensor', got 'logits'"):
        model(ids, torch.ones_like(ids), num_anchors=2, mode="logits")
    with pytest.raises(TypeError):  # a plain module: no trainer's arguments
        RetrievalAdaptation(embedder=embedder, data_preprocessor=None)
