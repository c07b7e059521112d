"""Small corpora of the three `vlr mine` formats (paragraph samples, NLI pairs, an MVC corpus)
over a few colours and animals, with a text two samples share, for tests/mine/."""

from __future__ import annotations

import json

MODEL = "_bow_model:BagOfWords"
COLOURS = ["red", "blue", "green", "black", "white", "brown"]
ANIMALS = ["dog", "cat", "horse", "bird", "cow"]


def paragraph_corpus(path, n=14):
    rows = [{"id": f"img{i}", "caption": f"a {COLOURS[i % 6]} {ANIMALS[i % 5]} on the grass",
             "positives": [f"the {ANIMALS[i % 5]} is {COLOURS[i % 6]}", f"{COLOURS[i % 6]} {ANIMALS[i % 5]} {i}"],
             "paragraph": f"A {COLOURS[i % 6]} {ANIMALS[i % 5]} stands on green grass."} for i in range(n)]
    rows[3]["positives"].append(rows[9]["caption"])  # a text two samples share
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def nli_corpus(path):
    pairs = [(f"a {c} {a} runs", f"the {a} that is {c} is running") for c in COLOURS[:4] for a in ANIMALS[:3]]
    pairs.append((pairs[0][0], "an animal moves"))
    path.write_text("sent0,sent1\n" + "".join(f"{a},{b}\n" for a, b in pairs))


def mvc_corpus(path, n=13):
    rows = [{"id": f"v{i}", "video": f"v{i}.mp4", "S1": f"a {COLOURS[i % 6]} {ANIMALS[i % 5]} runs",
             "O": f"{ANIMALS[i % 5]} clip", "D1*": f"A {COLOURS[i % 6]} {ANIMALS[i % 5]} runs far away {i}.",
             "meta": {"i": i}} for i in range(n)]
    del rows[4]["D1*"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


CORPORA = {"paragraph": ("train.jsonl", ".jsonl", lambda p: paragraph_corpus(p)), "nli": ("nli.csv", ".csv", nli_corpus),
           "mvc": ("mvc.jsonl", ".jsonl", mvc_corpus)}
