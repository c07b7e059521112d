"""The papers' protocols are data: token budgets as the paragraph paper's tables state them, frames,
samplers and text views of the video papers, and the check of a store's frames against them."""

import pytest

from vlr_plugins.eval import list_protocols, token_budgets


def test_paper_budgets():
    t2 = token_budgets("paragraph-supervision/table2")
    t4 = token_budgets("paragraph-supervision/table4")
    assert t2 == {"flickr30k": 77, "coco": 77, "sharegpt4v": 77, "docci": 128}
    # Table 4 differs only in ShareGPT4V, encoded at the paragraph budget
    assert {k for k in t2 if t2[k] != t4[k]} == {"sharegpt4v"} and t4["sharegpt4v"] == 128
    assert set(list_protocols()) >= {"paragraph-supervision/table2", "paragraph-supervision/table4"}


def test_overrides_and_errors():
    assert token_budgets("paragraph-supervision/table2", {"docci": 248})["docci"] == 248
    assert token_budgets(None, {"msrvtt": 64}) == {"msrvtt": 64}
    with pytest.raises(KeyError, match="unknown protocol"):
        token_budgets("nope")
    with pytest.raises(ValueError, match="integer >= 3"):
        token_budgets(None, {"docci": 1})


# --------------------------------------------------------------------------- video protocols

SHORT_QUERIES = ("msrvtt", "msvd", "lsmdc")
PARAGRAPHS_AND_FINE_GRAINED = ("didemo", "activitynet", "carebench", "dream1k", "shot2story-clip", "shot2story-shot")


def test_multi_view_captions_evaluates_16_middle_frames_with_a_view_per_benchmark():
    from vlr_plugins.eval import protocol_entries

    mvc = protocol_entries("multi-view-captions/zero-shot")
    assert set(mvc) == set(SHORT_QUERIES + PARAGRAPHS_AND_FINE_GRAINED)
    assert {(e.frames, e.sampler) for e in mvc.values()} == {(16, "middle")}  # UMT's evaluation sampling
    # our reading (the paper does not say): the summary view for short queries, detailed for the rest
    assert {name for name, e in mvc.items() if e.text_view == "summary"} == set(SHORT_QUERIES)
    assert {name for name, e in mvc.items() if e.text_view == "detailed"} == set(PARAGRAPHS_AND_FINE_GRAINED)
    # UMT's zero-shot max_txt_l for short queries, MVC's 128-token captions for the rest
    assert token_budgets("multi-view-captions/zero-shot") == {
        **{n: 32 for n in SHORT_QUERIES}, **{n: 128 for n in PARAGRAPHS_AND_FINE_GRAINED}}


def test_carebench_evaluates_32_uniform_frames_at_each_model_s_own_length():
    from vlr_plugins.eval import protocol_entries

    care = protocol_entries("carebench/zero-shot")
    assert care["carebench"].frames == 32 and care["carebench"].sampler == "uniform"
    assert {(e.frames, e.sampler, e.text_view) for e in care.values()} == {(32, "uniform", None)}
    assert token_budgets("carebench/zero-shot") == {}


def test_every_entry_is_a_benchmark_protocol_and_the_image_protocols_keep_their_budgets():
    from vlr_plugins.eval import BenchmarkProtocol

    for entries in list_protocols().values():
        assert all(isinstance(e, BenchmarkProtocol) for e in entries.values())
    assert list_protocols()["paragraph-supervision/table2"]["docci"] == BenchmarkProtocol(max_tokens=128)


@pytest.mark.parametrize("raw, message", [
    ({"frames": 0}, "frames: expected an integer >= 1"),
    ({"sampler": "random"}, "sampler: expected one of rand, middle, uniform, fps"),
    ({"text_view": "long"}, "text_view: expected one of summary, detailed"),
    ({"max_tokens": 2}, "max_tokens: expected an integer >= 3"),
    ({"frame": 16}, "unknown key 'frame'"),
    ("sixteen", "expected a token budget or a mapping"),
])
def test_a_malformed_entry_names_the_protocol_benchmark_and_key(raw, message):
    from vlr_plugins.eval.protocols import _entry

    with pytest.raises(ValueError, match=message) as e:
        _entry("protocols.yaml, protocol 'p', benchmark 'msrvtt'", raw)
    assert "benchmark 'msrvtt'" in str(e.value)


def check(meta, entry):
    from vlr_plugins.eval.protocols import check_store_sampling

    return check_store_sampling(meta, entry, store="stores/msrvtt", where="b.yaml, benchmark 1, field 'item_embeddings'",
                                protocol="multi-view-captions/zero-shot")


def test_a_store_embedded_as_the_protocol_says_passes():
    from vlr_plugins.eval import BenchmarkProtocol

    mvc = BenchmarkProtocol(frames=16, sampler="middle")
    assert check({"encoder": "x", "frames": 16, "sampler": "middle"}, mvc) is None
    # CaReBench's `uniform` picks exactly UMT's `middle` frames
    assert check({"frames": 32, "sampler": "middle"}, BenchmarkProtocol(frames=32, sampler="uniform")) is None
    # nothing to check: no protocol entry, or one without frames
    assert check({}, None) is None and check({"frames": 8}, BenchmarkProtocol(max_tokens=77)) is None


@pytest.mark.parametrize("meta, found", [
    ({"frames": 8, "sampler": "middle"}, "8 frames, sampler middle"),
    ({"frames": 16, "sampler": "rand"}, "16 frames, sampler rand"),
    ({"frames": 32}, "32 frames, sampler ?"),
])
def test_a_store_embedded_otherwise_is_refused(meta, found):
    from vlr_plugins.errors import ConfigError
    from vlr_plugins.eval import BenchmarkProtocol

    with pytest.raises(ConfigError) as e:
        check(meta, BenchmarkProtocol(frames=16, sampler="middle"))
    message = str(e.value)
    assert message.startswith("b.yaml, benchmark 1, field 'item_embeddings': the embedding store stores/msrvtt")
    assert found in message and "multi-view-captions/zero-shot" in message and "16 frames, sampler middle" in message


def test_a_store_that_does_not_record_its_frames_is_a_warning_not_a_refusal():
    from vlr_plugins.eval import BenchmarkProtocol

    mvc = BenchmarkProtocol(frames=16, sampler="middle")
    assert "does not record its frames and sampler" in check({"encoder": "blip"}, mvc)
    assert "does not record its sampler" in check({"frames": 16}, mvc)


@pytest.mark.parametrize("meta, field", [({"frames": "16"}, "meta.frames"), ({"frames": True}, "meta.frames"),
                                         ({"sampler": "even"}, "meta.sampler")])
def test_a_malformed_store_meta_names_its_field(meta, field):
    from vlr_plugins.errors import ConfigError
    from vlr_plugins.eval import BenchmarkProtocol

    with pytest.raises(ConfigError, match=f"stores/msrvtt/index.json, field '{field}'"):
        check(meta, BenchmarkProtocol(frames=16, sampler="middle"))
