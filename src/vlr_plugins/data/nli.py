"""NLI sentence triplets in SimCSE's CSV layout: the stage-II training data of E5-V and CaRe.

SimCSE's ``nli_for_simcse.csv`` (SNLI + MNLI: a premise, an entailment as its positive,
a contradiction as its hard negative) starts with the header ``sent0,sent1,hard_neg``;
each following record is one triplet, fields quoted as CSV quotes them. A file with only
``sent0,sent1`` holds pairs (no hard negatives), as SimCSE also accepts.
"""

from __future__ import annotations

import csv
import os
from typing import NamedTuple

from vlr_plugins.errors import DataFormatError
from vlr_plugins.registry import READERS

__all__ = ["NLITriplet", "NLI_COLUMNS", "read_nli_triplets"]

#: SimCSE's column names: the sentence, its positive (entailment), its hard negative (contradiction)
NLI_COLUMNS = ("sent0", "sent1", "hard_neg")
ON_EMPTY = ("error", "space")


class NLITriplet(NamedTuple):
    """One training record: ``sent0`` (s_i), ``sent1`` (s_i+), ``hard_neg`` (s_i-, or ``None``)."""

    sent0: str
    sent1: str
    hard_neg: str | None = None


@READERS.register(name="nli_triplets")
def read_nli_triplets(path: str | os.PathLike[str], *, on_empty: str = "error") -> list[NLITriplet]:
    """Read SimCSE's NLI CSV (``sent0,sent1,hard_neg``, or ``sent0,sent1``) into triplets.

    Every record is checked: the header must name ``sent0`` and ``sent1`` (and may name
    ``hard_neg``) and nothing else; each record must have one field per column. An empty
    sentence is an error naming its line and column, unless ``on_empty="space"``, which
    turns it into ``" "`` as SimCSE's own data preparation does for missing cells. Lines
    are counted as editors count them (1 = the header); a quoted field spanning lines is
    reported at the line where its record ends.

    Example::

        triplets = read_nli_triplets("data/nli_for_simcse.csv")   # 275,601 records
        triplets[0].sent0, triplets[0].sent1, triplets[0].hard_neg
    """
    if on_empty not in ON_EMPTY:
        raise ValueError(f"on_empty must be one of {ON_EMPTY}, found {on_empty!r}")
    try:
        f = open(path, encoding="utf-8", newline="")
    except FileNotFoundError:
        raise DataFormatError(path, "no such file") from None
    with f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
            if header is None:
                raise DataFormatError(path, "the file is empty; expected the header sent0,sent1,hard_neg")
            header = [h.strip() for h in header]
            if header not in (list(NLI_COLUMNS), list(NLI_COLUMNS[:2])):
                raise DataFormatError(path, f"expected the header sent0,sent1,hard_neg (or sent0,sent1), "
                                            f"found {','.join(header)!r}", record=1)
            out: list[NLITriplet] = []
            for row in reader:
                line = reader.line_num
                if not row:
                    continue
                if len(row) != len(header):
                    raise DataFormatError(path, f"expected {len(header)} fields ({','.join(header)}), "
                                                f"found {len(row)}", record=line)
                for column, value in zip(header, row):
                    if not value.strip():
                        if on_empty == "error":
                            raise DataFormatError(path, "empty sentence (on_empty='space' keeps it as ' ', "
                                                        "as SimCSE does)", record=line, field=column)
                row = [v if v.strip() else " " for v in row]
                out.append(NLITriplet(*row))
        except csv.Error as e:
            raise DataFormatError(path, f"not valid CSV: {e}", record=reader.line_num) from None
        except UnicodeDecodeError as e:
            raise DataFormatError(path, f"not UTF-8 text: {e}") from None
    if not out:
        raise DataFormatError(path, "no records after the header")
    return out
