"""Read Princeton WordNet 3.0's data files into a gloss -> category data set.

Each synset line of ``data.noun`` (``data.verb``, ``data.adj``, ``data.adv``)
carries its lexicographer file number in the second field (which of WordNet's
45 files, ``noun.animal``, ``noun.artifact``, ..., the synset was written in)
and its gloss after ``" | "``. The task is to tell the file from the gloss.
The format is described in WordNet's ``wndb(5WN)`` and ``lexnames(5WN)``
manual pages.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["LEXICOGRAPHER_FILES", "WORDNET_DIRS", "load_wordnet_glosses"]

#: The lexicographer files, in the order of their numbers (``lexnames(5WN)``).
LEXICOGRAPHER_FILES = (
    "adj.all",
    "adj.pert",
    "adv.all",
    "noun.Tops",
    "noun.act",
    "noun.animal",
    "noun.artifact",
    "noun.attribute",
    "noun.body",
    "noun.cognition",
    "noun.communication",
    "noun.event",
    "noun.feeling",
    "noun.food",
    "noun.group",
    "noun.location",
    "noun.motive",
    "noun.object",
    "noun.person",
    "noun.phenomenon",
    "noun.plant",
    "noun.possession",
    "noun.process",
    "noun.quantity",
    "noun.relation",
    "noun.shape",
    "noun.state",
    "noun.substance",
    "noun.time",
    "verb.body",
    "verb.change",
    "verb.cognition",
    "verb.communication",
    "verb.competition",
    "verb.consumption",
    "verb.contact",
    "verb.creation",
    "verb.emotion",
    "verb.motion",
    "verb.perception",
    "verb.possession",
    "verb.social",
    "verb.stative",
    "verb.weather",
    "adj.ppl",
)

#: Where Debian's and Ubuntu's ``wordnet-base`` package (and source installs) put the files.
WORDNET_DIRS = (
    "/usr/share/wordnet",
    "/usr/share/wordnet/dict",
    "/usr/local/share/wordnet",
    "/usr/local/WordNet-3.0/dict",
)

_POS = ("noun", "verb", "adj", "adv")
_PREFIX = {"noun": "noun.", "verb": "verb.", "adj": "adj.", "adv": "adv."}
_INSTALL_HINT = (
    "install WordNet 3.0 (Debian/Ubuntu: `apt-get install wordnet-base`) or pass "
    "wordnet_dir= the folder that holds data.noun, data.verb, data.adj and data.adv"
)


def _data_file(pos: str, wordnet_dir: Any) -> Path:
    name = f"data.{pos}"
    if wordnet_dir is not None:
        path = Path(os.fspath(wordnet_dir)) / name
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist: {_INSTALL_HINT}")
        return path
    for folder in WORDNET_DIRS:
        path = Path(folder) / name
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"WordNet's {name} is in none of {', '.join(WORDNET_DIRS)}: {_INSTALL_HINT}"
    )


def _parse_line(line: str, path: Path, number: int) -> tuple[int, str, str, int]:
    """``(offset, first lemma, gloss, lexicographer file number)`` of one synset line."""
    head, bar, gloss = line.partition(" | ")
    fields = head.split()
    try:
        offset, lex_file = int(fields[0]), int(fields[1])
        lemma = fields[4].replace("_", " ")
    except (IndexError, ValueError):
        raise ValueError(f"{path}:{number}: not a WordNet synset line: {line[:60]!r}") from None
    if not bar or not 0 <= lex_file < len(LEXICOGRAPHER_FILES):
        raise ValueError(f"{path}:{number}: not a WordNet synset line: {line[:60]!r}")
    return offset, lemma, gloss.strip(), lex_file


def load_wordnet_glosses(
    pos: str = "noun", wordnet_dir: str | os.PathLike | None = None, *, return_X_y: bool = False
):
    """Load WordNet's glosses of one part of speech with their lexicographer category.

    The classification task *gloss -> lexicographer file*: for nouns, 82,115
    glosses in 26 unbalanced categories (``noun.Tops``, ``noun.act``,
    ``noun.animal``, ... ``noun.time``); adjectives have 3, adverbs 1 and
    verbs 15. The files come from Princeton WordNet 3.0 as Debian's
    ``wordnet-base`` package installs it (``/usr/share/wordnet``), or from
    ``wordnet_dir``. WordNet's licence lets it be used and redistributed
    with its copyright notice (in the package's ``copyright`` file).

    Parameters
    ----------
    pos : {"noun", "verb", "adj", "adv"}, default="noun"
        Which data file to read (``data.<pos>``).
    wordnet_dir : str or path, optional
        The folder holding ``data.<pos>``; by default the first of
        ``WORDNET_DIRS`` (``/usr/share/wordnet`` and the usual install folders) that has it.
    return_X_y : bool, default=False
        Return ``(glosses, target)`` instead of the Bunch, as scikit-learn's
        loaders do.

    Returns
    -------
    sklearn.utils.Bunch
        data : list of str
            The glosses (definition and examples), in file order.
        target : ndarray of shape (n,), int64
            Index of each gloss's category in ``target_names``.
        target_names : list of str
            The categories of ``pos``, in WordNet's order (their file numbers).
        lemmas : list of str
            The first word of each synset (``"dog"``, ``"hot dog"``).
        offsets : ndarray of shape (n,), int64
            Each synset's byte offset in the file (its identifier).
        filename : str
            The file read.
        DESCR : str
            What the data set is.

    Raises
    ------
    FileNotFoundError
        The file is not found; the message says to install ``wordnet-base``
        or to pass ``wordnet_dir``.
    ValueError
        An unknown ``pos``, or a line that is not a synset line.

    Examples
    --------
    >>> from pathlib import Path
    >>> import reliacal
    >>> excerpt = Path(reliacal.__file__).parents[1] / "tests" / "data" / "wordnet"
    >>> glosses = load_wordnet_glosses("noun", wordnet_dir=excerpt)
    >>> glosses.lemmas[0], glosses.target_names[glosses.target[0]]
    ('entity', 'noun.Tops')
    >>> len(glosses.target_names)
    26
    """
    if pos not in _POS:
        raise ValueError(f"pos must be one of {_POS}; got {pos!r}")
    from sklearn.utils import Bunch

    path = _data_file(pos, wordnet_dir)
    names = [name for name in LEXICOGRAPHER_FILES if name.startswith(_PREFIX[pos])]
    index = {LEXICOGRAPHER_FILES.index(name): i for i, name in enumerate(names)}
    offsets, lemmas, glosses, target = [], [], [], []
    with open(path, encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, start=1):
            if line.startswith("  "):  # the licence header
                continue
            offset, lemma, gloss, lex_file = _parse_line(line, path, number)
            if lex_file not in index:
                raise ValueError(
                    f"{path}:{number}: category {LEXICOGRAPHER_FILES[lex_file]} in data.{pos}"
                )
            offsets.append(offset)
            lemmas.append(lemma)
            glosses.append(gloss)
            target.append(index[lex_file])
    if not glosses:
        raise ValueError(f"{path} holds no synset lines")
    target_array = np.asarray(target, dtype=np.int64)
    if return_X_y:
        return glosses, target_array
    return Bunch(
        data=glosses,
        target=target_array,
        target_names=names,
        lemmas=lemmas,
        offsets=np.asarray(offsets, dtype=np.int64),
        filename=str(path),
        DESCR=(
            f"Princeton WordNet 3.0 {pos} glosses ({len(glosses)} synsets from {path}), "
            f"labelled with their lexicographer file ({len(names)} categories). "
            "WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved."
        ),
    )
