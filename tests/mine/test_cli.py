"""`vlr mine` end to end on small corpora in their trainers' formats, with a real text model
(a bag-of-words `module:callable`): the mined negatives equal a brute-force search written
here over the model's own embeddings, never a positive, and the files read back with the
trainers' readers."""

from __future__ import annotations

import json

import pytest
import torch

from _bow_model import BagOfWords
from _refusal import run_vlr
from vlr_plugins.data.nli import read_nli_triplets
from vlr_plugins.data.sample import read_paragraph_samples

MODEL = "_bow_model:BagOfWords"
COLOURS = ["red", "blue", "green", "black", "white", "brown"]
ANIMALS = ["dog", "cat", "horse", "bird", "cow"]


def paragraph_corpus(path, n=14):
    rows = []
    for i in range(n):
        colour, animal = COLOURS[i % 6], ANIMALS[i % 5]
        rows.append({"id": f"img{i}", "caption": f"a {colour} {animal} on the grass",
                     "positives": [f"the {animal} is {colour}", f"{colour} {animal} outside {i}"],
                     "paragraph": f"A {colour} {animal} stands on green grass. It looks at the camera."})
    rows[3]["positives"].append(rows[9]["caption"])  # a text two samples share: mined for neither
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def brute_force(queries, gallery, positives, k, range_min=0, range_max=None, margin=None):
    """Every query's gallery sorted by (-cosine, index) in float64, positives (and, with a
    margin, texts within it of the lowest positive) removed, then the window."""
    q = torch.nn.functional.normalize(queries.double(), dim=1)
    g = torch.nn.functional.normalize(gallery.double(), dim=1)
    scores = (q @ g.T).tolist()
    out = []
    for row, own in zip(scores, positives):
        order = sorted(range(len(row)), key=lambda j: (-row[j], j))
        limit = min(row[j] for j in own) - margin if margin is not None else None
        kept = [j for j in order if j not in own and (limit is None or row[j] <= limit)]
        window = kept[range_min:range_max]
        out.append(window[:k])
    return out


def gallery_of(rows, fields=("caption", "positives")):
    texts, owners = [], []
    for i, r in enumerate(rows):
        for name in fields:
            for t in ([r[name]] if isinstance(r[name], str) else r[name]):
                if t not in texts:
                    texts.append(t)
                    owners.append(set())
                owners[texts.index(t)].add(i)
    positives = [{j for j, o in enumerate(owners) if i in o} for i in range(len(rows))]
    return texts, positives


@pytest.mark.parametrize("options, window", [
    ([], dict(k=3)),
    (["--range-min", "2", "--range-max", "6"], dict(k=3, range_min=2, range_max=6)),
    (["--margin", "0.05"], dict(k=3, margin=0.05)),
])
def test_paragraph_samples_get_the_brute_force_hard_negatives(tmp_path, options, window):
    rows = paragraph_corpus(tmp_path / "train.jsonl")
    out = tmp_path / "mined.jsonl"
    code, stdout, stderr = run_vlr(["mine", "paragraph", tmp_path / "train.jsonl", "--model", MODEL, "--out", out,
                                    "-k", "3", *options])
    assert code == 0, stderr
    texts, positives = gallery_of(rows)
    model = BagOfWords()
    want = brute_force(model.encode_text([r["caption"] for r in rows]), model.encode_text(texts), positives, **window)
    got = read_paragraph_samples(out)
    assert [s.id for s in got] == [r["id"] for r in rows]
    for sample, row, expected, own in zip(got, rows, want, positives):
        assert list(sample.hard_negatives) == [texts[j] for j in expected]
        assert not set(sample.hard_negatives) & {texts[j] for j in own}
        assert sample.caption == row["caption"] and list(sample.positives) == row["positives"]
    assert "mined" in stdout and str(out) in stdout


def test_paragraph_queries_can_be_the_images_of_a_store(tmp_path):
    from vlr_plugins.data.embedding_store import EmbeddingStoreWriter

    rows = paragraph_corpus(tmp_path / "train.jsonl")
    images = torch.randn(len(rows), 24, generator=torch.Generator().manual_seed(0))
    with EmbeddingStoreWriter(tmp_path / "store", dim=24) as writer:
        writer.add([r["id"] for r in rows][::-1], images.flip(0))  # stored in another order
    out = tmp_path / "mined.jsonl"
    code, _, stderr = run_vlr(["mine", "paragraph", tmp_path / "train.jsonl", "--model", MODEL, "--out", out,
                               "--query", "image", "--image-embeddings", tmp_path / "store", "-k", "2",
                               "--pool", "caption"])
    assert code == 0, stderr
    texts, positives = gallery_of(rows, ("caption",))
    want = brute_force(images, BagOfWords().encode_text(texts), positives, k=2)
    assert [list(s.hard_negatives) for s in read_paragraph_samples(out)] == [[texts[j] for j in w] for w in want]


def test_keep_existing_adds_the_mined_after_the_given(tmp_path):
    rows = paragraph_corpus(tmp_path / "train.jsonl")
    rows[0]["hard_negatives"] = ["a purple dragon"]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "mined.jsonl"
    assert run_vlr(["mine", "paragraph", tmp_path / "train.jsonl", "--model", MODEL, "--out", out, "-k", "2",
                    "--keep-existing"])[0] == 0
    first = read_paragraph_samples(out)[0]
    assert first.hard_negatives[0] == "a purple dragon" and len(first.hard_negatives) == 3


def test_nli_records_get_one_record_per_mined_sentence(tmp_path):
    pairs = [(f"a {c} {a} runs", f"the {a} that is {c} is running") for c in COLOURS[:4] for a in ANIMALS[:3]]
    pairs.append((pairs[0][0], "an animal moves"))  # an anchor with two positives
    (tmp_path / "nli.csv").write_text("sent0,sent1\n" + "".join(f"{a},{b}\n" for a, b in pairs))
    out = tmp_path / "triplets.csv"
    code, _, stderr = run_vlr(["mine", "nli", tmp_path / "nli.csv", "--model", MODEL, "--out", out, "-k", "2"])
    assert code == 0, stderr
    gallery = list(dict.fromkeys(b for _, b in pairs))
    positives = [{gallery.index(b) for a2, b in pairs if a2 == a} for a, _ in pairs]
    model = BagOfWords()
    want = brute_force(model.encode_text([a for a, _ in pairs]), model.encode_text(gallery), positives, k=2)
    got = read_nli_triplets(out)
    expected = [(a, b, gallery[j]) for (a, b), w in zip(pairs, want) for j in w]
    assert [(t.sent0, t.sent1, t.hard_neg) for t in got] == expected
    assert all(t.hard_neg not in {b for a2, b in pairs if a2 == t.sent0} for t in got)
