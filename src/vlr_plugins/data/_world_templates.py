"""The attribute table and sentence templates of :mod:`vlr_plugins.data.synthetic_world`.

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

_TRAIN_FRAMES = (
    _INTRO, _TRAIN_COUNTED, _TRAIN_DESCRIBED, _TRAIN_PLACE, _TRAIN_WEATHER, _TRAIN_SCENE
)
_EVAL_FRAMES = (_EVAL_COUNTED, _EVAL_DESCRIBED, _EVAL_PLACE, _EVAL_WEATHER, _EVAL_SCENE)
# words the renderers insert besides those of the frames
_FILLER = ("a", "an", "some", "is", "are", "and", "the", "on", "in", "by", "day", "weather")


def template_words() -> set[str]:
    """Every word any template or attribute value can produce (lowercase)."""
    frames = [f for group in (*_TRAIN_FRAMES, *_EVAL_FRAMES) for f in group]
    frames += [*CAPTION_FRAMES, *SCENE_CAPTION_FRAMES, *_FILLER]
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


def paragraph(rng: random.Random, values: dict[str, str]) -> str:
    """3-6 training sentences that together name every attribute, in shuffled order."""
    intro = rng.choice(_INTRO).format(np=_np(values, ("object",)), be=_be(values))
    frames = _TRAIN_FRAMES[1:]
    groups = _groups(rng, rng.randint(2, 5))
    sentences = [intro] + [_sentence(rng, values, g, frames) for g in groups]
    rng.shuffle(sentences)
    return " ".join(sentences)


def long_description(rng: random.Random, values: dict[str, str]) -> str:
    """3-5 evaluation sentences in frames training never uses; the object comes first."""
    groups = _groups(rng, rng.randint(3, 5))
    groups.sort(key=lambda g: not set(g) & set(_NP_ATTRS))  # stable: subject sentences first
    return " ".join(_sentence(rng, values, g, _EVAL_FRAMES) for g in groups)
