"""The attribute table and sentence templates of :mod:`vlr_plugins.demo.synthetic_world`.

Every attribute value is written with words that belong to it alone (its *surface
forms*), and no template word is a surface form, so a text can be parsed back into
the attribute values it names. Training paragraphs and the long evaluation
descriptions use different sentence frames built from the same words.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

#: attribute -> value -> surface forms. Objects have (singular, plural); the order of
#: attributes is the order of the one-hot blocks of an image vector.
ATTRIBUTES: dict[str, dict[str, tuple[str, ...]]] = {
    "object": {
        w: (w, w + "s")
        for w in (
            "dog", "cat", "car", "bicycle", "boat", "horse", "bird", "chair", "umbrella", "kite"
        )
    },
    "count": {w: (w,) for w in ("one", "two", "three", "four", "five", "six")},
    "size": {w: (w,) for w in ("tiny", "small", "medium", "large", "huge", "giant")},
    "colour": {
        w: (w,) for w in ("red", "blue", "green", "yellow", "white", "black", "orange", "purple")
    },
    "place": {
        w: (w,) for w in ("beach", "street", "forest", "kitchen", "park", "field", "garden", "lake")
    },
    "weather": {w: (w,) for w in ("sunny", "snowy", "rainy", "foggy", "cloudy", "windy", "stormy")},
}
_NP_ATTRS = ("count", "size", "colour")
_SCENE_ATTRS = ("place", "weather")
_PREPOSITION = {"beach": "on", "street": "on", "lake": "by"}  # others: "in"
GENERIC_NOUNS = (("thing", "things"), ("item", "items"))
_WEATHER_PP = ("on a {} day", "in {} weather")

# Short captions: {np} names the chosen noun-phrase attributes, {pp} the scene ones.
CAPTION_FRAMES = (
    "{np}{pp}", "a photo of {np}{pp}", "there {be} {np}{pp}", "a picture of {np}{pp}",
    "an image of {np}{pp}", "a close view of {np}{pp}",
)
SCENE_CAPTION_FRAMES = ("a scene{pp}", "a photo taken{pp}", "a view{pp}", "an image taken{pp}")

# Training paragraphs: one sentence per group of attributes.
_INTRO = ("The photo shows {np}.", "This is a picture of {np}.", "In this image there {be} {np}.")
_TRAIN_COUNTED = ("There {be} {np}{pp}.", "The photo shows {np}{pp}.")
_TRAIN_DESCRIBED = ("The {n} {be} {adjs}{pp}.", "There {be} {np}{pp}.")
_TRAIN_PLACE = (
    "The scene takes place {place}.", "The photo was taken {place}.",
    "The {n} can be seen {place}.", "In the background we can see the {p}.",
)
_TRAIN_WEATHER = (
    "The weather is {w}.", "It is a {w} day.", "The photo was taken on a {w} day.",
    "The weather looks {w}.",
)
_TRAIN_SCENE = (
    "The scene takes place {place} on a {w} day.", "It is a {w} day {place}.",
    "The photo was taken {place} in {w} weather.",
)
# Long evaluation descriptions: other frames, no word that training paragraphs lack.
_EVAL_COUNTED = ("{Np} can be seen in the image{pp}.", "We can see {np}{pp}.")
_EVAL_DESCRIBED = ("The {n} in the image {be} {adjs}{pp}.", "We can see {np}{pp}.")
_EVAL_PLACE = ("The picture shows the {p}.", "This image was taken {place}.")
_EVAL_WEATHER = ("The day is {w}.", "The image shows a {w} day.")
_EVAL_SCENE = ("This image shows the {p} on a {w} day.", "We can see the {p} in {w} weather.")

# Detail sentences: light, framing, focus, mood. They name no attribute and do not depend
# on the image, so they make a text long without making it more informative, as much of a
# real long description is for a vision encoder that cannot see such details. Evaluation
# uses other sentences made of the same words.
_TRAIN_DETAIL = (
    "The light is soft and falls evenly across the whole frame.",
    "Nothing else in the frame draws the eye away from the subject.",
    "The picture is sharp and the colours look natural throughout.",
    "The frame is well balanced with plenty of space around the subject.",
    "Fine details are easy to make out in the foreground.",
    "The background is slightly blurred which keeps the focus on the subject.",
    "The overall mood of the picture is calm and quiet.",
    "The shot was taken from eye level at a short distance.",
    "Shadows are gentle and there is no harsh glare anywhere.",
    "The edges of the frame are clean and nothing is cut off.",
    "Everything looks still as if the moment had been paused.",
    "The composition is simple and easy to read at a glance.",
)
_EVAL_DETAIL = (
    "The colours look natural and the light is soft throughout the frame.",
    "Nothing is cut off at the edges and the frame is clean.",
    "The focus is on the subject and the background is blurred.",
    "At a glance the picture looks calm and still.",
    "There is plenty of space around the subject and the frame is balanced.",
    "The shot is sharp from the foreground to the background.",
    "Fine details in the foreground are easy to read.",
    "The mood is quiet and nothing draws the eye away.",
    "The light is gentle and the shadows are soft.",
    "There is no harsh glare and the light falls evenly on the whole picture.",
    "The subject was taken at eye level from a short distance.",
    "The composition is balanced and everything is easy to make out.",
)

_TRAIN_FRAMES = (
    _INTRO, _TRAIN_COUNTED, _TRAIN_DESCRIBED, _TRAIN_PLACE, _TRAIN_WEATHER, _TRAIN_SCENE
)
_EVAL_FRAMES = (_EVAL_COUNTED, _EVAL_DESCRIBED, _EVAL_PLACE, _EVAL_WEATHER, _EVAL_SCENE)
# words the renderers insert besides those of the frames
_FILLER = ("a", "an", "some", "is", "are", "and", "the", "on", "in", "by", "day", "weather")
_TOKEN = re.compile(r"[^\W_]+|[^\w\s]")


def template_words() -> set[str]:
    """Every word any template or attribute value can produce (lowercase)."""
    frames = [f for group in (*_TRAIN_FRAMES, *_EVAL_FRAMES) for f in group]
    frames += [*CAPTION_FRAMES, *SCENE_CAPTION_FRAMES, *_FILLER, *_TRAIN_DETAIL, *_EVAL_DETAIL]
    frames += [form for pair in GENERIC_NOUNS for form in pair]
    frames += [f for values in ATTRIBUTES.values() for forms in values.values() for f in forms]
    text = re.sub(r"\{[^}]*\}", " ", " ".join(frames)).lower()
    return set(re.findall(r"[^\W_]+", text))


@dataclass(frozen=True)
class CaptionSpec:
    """How a short caption is phrased, apart from the values it names.

    A hard negative is the same spec rendered with one named value changed.
    """

    named: tuple[str, ...]
    frame: int
    generic: int
    weather_form: int


def _noun(values: dict[str, str], generic: int | None = None) -> str:
    plural = values["count"] != "one"
    if generic is None:
        return ATTRIBUTES["object"][values["object"]][plural]
    return GENERIC_NOUNS[generic][plural]


def _np(values: dict[str, str], named, generic: int | None = None) -> str:
    """Determiner, size, colour and noun, naming only the attributes in ``named``."""
    words = [values[a] for a in ("size", "colour") if a in named]
    words.append(_noun(values, None if "object" in named else generic))
    if "count" in named:
        det = values["count"]
    elif values["count"] != "one":
        det = "some"  # the plural already says "more than one"
    else:
        det = "an" if words[0][0] in "aeiou" else "a"
    return " ".join([det, *words])


def _be(values: dict[str, str]) -> str:
    return "is" if values["count"] == "one" else "are"


def _place(values: dict[str, str]) -> str:
    place = values["place"]
    return f"{_PREPOSITION.get(place, 'in')} the {place}"


def _pp(values: dict[str, str], named, weather_form: int = 0) -> str:
    parts = [_place(values)] if "place" in named else []
    if "weather" in named:
        parts.append(_WEATHER_PP[weather_form].format(values["weather"]))
    return "".join(" " + p for p in parts)


def sample_caption_spec(rng: random.Random) -> CaptionSpec:
    """One or two attributes to name (usually the object) and a phrasing for them."""
    others = [a for a in ATTRIBUTES if a != "object"]
    k = rng.choice((1, 2))
    if rng.random() < 0.6:  # most captions name the object, as most real ones do
        named = {"object", *rng.sample(others, k - 1)}
    else:
        named = set(rng.sample(others, k))
    frames = CAPTION_FRAMES if named - set(_SCENE_ATTRS) else SCENE_CAPTION_FRAMES
    return CaptionSpec(
        named=tuple(a for a in ATTRIBUTES if a in named),
        frame=rng.randrange(len(frames)),
        generic=rng.randrange(len(GENERIC_NOUNS)),
        weather_form=rng.randrange(len(_WEATHER_PP)),
    )


def render_caption(spec: CaptionSpec, values: dict[str, str]) -> str:
    """The short caption ``spec`` describes for an image with attribute ``values``."""
    pp = _pp(values, spec.named, spec.weather_form)
    if not set(spec.named) - set(_SCENE_ATTRS):
        return SCENE_CAPTION_FRAMES[spec.frame].format(pp=pp)
    np = _np(values, spec.named, spec.generic)
    return CAPTION_FRAMES[spec.frame].format(np=np, pp=pp, be=_be(values))


def _groups(rng: random.Random, k: int) -> list[list[str]]:
    """The non-object attributes, shuffled and cut into ``k`` non-empty groups."""
    rest = [a for a in ATTRIBUTES if a != "object"]
    rng.shuffle(rest)
    cuts = sorted(rng.sample(range(1, len(rest)), k - 1))
    return [rest[i:j] for i, j in zip([0, *cuts], [*cuts, len(rest)])]


def _sentence(rng: random.Random, values: dict[str, str], group, frames) -> str:
    """One sentence naming the object and every attribute of ``group``."""
    counted, described, place_only, weather_only, scene = frames
    described_attrs = [a for a in _NP_ATTRS if a in group]
    fill = {
        "n": _noun(values), "be": _be(values), "p": values["place"], "w": values["weather"],
        "place": _place(values), "pp": _pp(values, group, rng.randrange(len(_WEATHER_PP))),
        "adjs": " and ".join(values[a] for a in described_attrs if a != "count"),
        "np": _np(values, ("object", *described_attrs)),
    }
    fill["Np"] = fill["np"][0].upper() + fill["np"][1:]
    if "count" in group:
        choices = counted
    elif described_attrs:
        choices = described
    elif "place" in group and "weather" in group:
        choices = scene
    else:
        choices = place_only if "place" in group else weather_only
    text = rng.choice(choices).format(**fill)
    return text[0].upper() + text[1:]


def count_tokens(text: str) -> int:
    """The length of ``text`` under the world's tokenizer, ``[CLS]`` and ``[SEP]`` included:
    every word of the world is one token, and so is every punctuation mark."""
    return len(_TOKEN.findall(text)) + 2


def _spread(rng: random.Random, sentences: list[str], details: tuple[str, ...], tokens: int) -> list[str]:
    """``sentences`` with detail sentences between them, as many as keep the text within
    ``tokens``, dealt evenly over the gaps; the first and last sentence stay first and last,
    so the attributes are spread over the whole length."""
    pool = list(details)
    rng.shuffle(pool)
    total, chosen = count_tokens(" ".join(sentences)), []
    for detail in pool:
        extra = count_tokens(detail) - 2
        if total + extra <= tokens:
            chosen.append(detail)
            total += extra
    order = list(range(len(sentences) - 1))
    rng.shuffle(order)
    gaps: list[list[str]] = [[] for _ in order]
    for i, detail in enumerate(chosen):
        gaps[order[i % len(order)]].append(detail)
    out = [sentences[0]]
    for gap, sentence in zip(gaps, sentences[1:]):
        out += [*gap, sentence]
    return out


def paragraph(rng: random.Random, values: dict[str, str], tokens: int = 0) -> str:
    """3-6 training sentences that together name every attribute, in shuffled order; with
    ``tokens``, detail sentences between them fill the paragraph up to that many tokens."""
    intro = rng.choice(_INTRO).format(np=_np(values, ("object",)), be=_be(values))
    frames = _TRAIN_FRAMES[1:]
    groups = _groups(rng, rng.randint(2, 5))
    sentences = [intro] + [_sentence(rng, values, g, frames) for g in groups]
    rng.shuffle(sentences)
    if tokens:
        sentences = _spread(rng, sentences, _TRAIN_DETAIL, tokens)
    return " ".join(sentences)


def long_description(rng: random.Random, values: dict[str, str], tokens: int = 0) -> str:
    """3-5 evaluation sentences in frames training never uses; the object comes first. With
    ``tokens``, detail sentences (also of their own frames) fill it up to that many tokens."""
    groups = _groups(rng, rng.randint(3, 5))
    groups.sort(key=lambda g: not set(g) & set(_NP_ATTRS))  # stable: subject sentences first
    sentences = [_sentence(rng, values, g, _EVAL_FRAMES) for g in groups]
    if tokens:
        sentences = _spread(rng, sentences, _EVAL_DETAIL, tokens)
    return " ".join(sentences)
