"""Attributes, colours and sentence templates of the synthetic video world (``vlr demo mvc``).

Each caption view of the MVC paper has its own family of templates: a sparse, web-like
original caption (``O``), two summary styles (``S1``, ``S2``), two refined detailed styles
(``D1*``, ``D2*``), raw detailed captions with one wrong attribute (``D1``, ``D2``), and two
event-focused semantic positives (``P1``, ``P2``). The evaluation queries use phrasings
that no training caption uses. No motion or change is told apart by left and right: the
training crops flip clips horizontally, as UMT's do.
"""

from __future__ import annotations

SHAPES = ("square", "disc", "bar")
#: object colours (bright) and background colours (dark), RGB
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (230, 40, 40), "green": (40, 210, 60), "blue": (60, 110, 255), "yellow": (240, 230, 40),
    "magenta": (230, 50, 220), "cyan": (40, 220, 230), "white": (245, 245, 245), "orange": (250, 150, 30),
}
BACKGROUNDS: dict[str, tuple[int, int, int]] = {
    "black": (10, 10, 10), "gray": (100, 100, 100), "navy": (10, 20, 90), "maroon": (90, 15, 20),
}
MOTIONS = ("up", "down", "across", "still")
#: "turns" changes the colour halfway; the others change the size, or nothing
CHANGES = ("none", "turns", "grows", "shrinks")

MOTION_VERB = {"up": "moves up", "down": "moves down", "across": "slides across the frame", "still": "stays in place"}
MOTION_LONG = {
    "up": "starts near the bottom of the frame and rises steadily toward the top",
    "down": "starts near the top of the frame and sinks steadily toward the bottom",
    "across": "starts near one side of the frame and slides horizontally to the other side",
    "still": "stays at the same spot for the whole clip",
}
MOTION_EVENT = {
    "up": "the {shape} rises toward the top of the frame",
    "down": "the {shape} drops toward the bottom of the frame",
    "across": "the {shape} travels sideways from one edge to the other",
    "still": "the {shape} does not move at all",
}
MOTION_QUERY = {"up": "going upward", "down": "going downward", "across": "passing sideways", "still": "not moving"}


def change_short(change: str, colour2: str) -> str:
    return {"none": "", "turns": f" and turns {colour2}", "grows": " and grows", "shrinks": " and shrinks"}[change]


def change_long(change: str, colour: str, colour2: str) -> str:
    return {"none": f"It keeps its {colour} colour and its size throughout.",
            "turns": f"Halfway through, its colour changes from {colour} to {colour2}.",
            "grows": "As it moves, it becomes larger and larger.",
            "shrinks": "As it moves, it becomes smaller and smaller."}[change]


def change_event(change: str, shape: str, colour: str, colour2: str) -> str:
    return {"none": f"the {colour} {shape} keeps the same colour and size",
            "turns": f"the {shape} switches from {colour} to {colour2} in the middle of the clip",
            "grows": f"the {colour} {shape} expands to about twice its size",
            "shrinks": f"the {colour} {shape} contracts to about half its size"}[change]


def change_query(change: str, colour2: str) -> str:
    return {"none": "with no change in colour or size", "turns": f"becoming {colour2} midway",
            "grows": "getting bigger", "shrinks": "getting smaller"}[change]


ORIGINAL = (  # O: short web captions naming one or two things, some of them off the point
    "{colour} {shape}", "a {shape} on {background}", "{shape} animation", "moving {colour} thing",
    "simple {shape} video", "{background} screen with a shape",
)
SUMMARY_1 = "a {colour} {shape} {motion}{change} on a {background} background."
SUMMARY_2 = "a {colour} {shape} {motion}{change}."
DETAILED_1 = ("The video shows a {background} background. A {colour} {shape} {motion_long}. {change_long} "
              "Nothing else appears in the frame.")
DETAILED_2 = ("A single {colour} {shape} is visible against a plain {background} background. Over the clip, the "
              "{shape} {motion_long}. {change_long}")
QUERY_SUMMARY = "footage of a {colour} {shape} {motion_query}"
QUERY_DETAILED = ("on a {background} backdrop there is one {colour} {shape}, {motion_query} and {change_query}; "
                  "the backdrop stays {background}")
