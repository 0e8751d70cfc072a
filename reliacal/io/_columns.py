"""Which class each probability column of a table holds, read from the column names.

A table written by another tool names its columns ``p_0, p_1, ...``,
``class3_prob``, or plain ``0, 1, ...``: a class number between a prefix and
a suffix that all the columns share. The
columns may come in any order (``p_1, p_0``, or the lexicographic
``p0, p1, p10, p11, p2, ...`` of a sorted dictionary), so their position
says nothing: the number does. Columns of non-numeric classes carry the class
label itself between a shared prefix and suffix (``p_cat, p_dog``,
``cat_prob``). Names that mix such columns with others (``comment``, pandas'
index column ``Unnamed: 0``) leave the classes unknown and are refused with a
message that names the odd columns. Columns named ``logit_0, logit_1, ...``
(or a key ``logits``) hold logits, as their names say.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from reliacal._validation import NUMBERED_NAME

__all__ = [
    "ColumnNumbering",
    "label_affixes",
    "names_logits",
    "number_columns",
    "odd_column",
    "pandas_index_columns",
]

# pandas names a column without a header "Unnamed: <position>" when it reads a CSV.
_PANDAS_INDEX = re.compile(r"^Unnamed: \d+$")
# "logit" or "logits" as a whole word at the start: logit_0, logits3, logit-cat, logits;
# not "logistic_score".
_LOGIT_NAME = re.compile(r"^logits?(?![a-z])", re.IGNORECASE)


@dataclass(frozen=True)
class ColumnNumbering:
    """The class numbers that the column names carry.

    Attributes
    ----------
    prefix, suffix : str
        What the numbered columns share before and after the number (may be
        empty).
    order : list of int
        Positions of the numbered columns, sorted by their class number.
    numbers : list of int
        The class numbers, ascending (``numbers[i]`` is the class of column
        ``order[i]``).
    strays : list of int
        Positions of the columns outside the numbered group (empty when every
        column is numbered).

    Examples
    --------
    >>> number_columns(["p_1", "p_0", "p_2"])
    ColumnNumbering(prefix='p_', suffix='', order=[1, 0, 2], numbers=[0, 1, 2], strays=[])
    """

    prefix: str
    suffix: str
    order: list[int]
    numbers: list[int]
    strays: list[int]


def number_columns(names: list[str]) -> ColumnNumbering | None:
    """Read class numbers from column names of the form ``<prefix><number><suffix>``.

    The largest group of names that share a prefix and a suffix (without
    digits) around a number gives
    the numbering; it must hold every column, or at least two, to count (a
    lone ``x1`` among ``cat`` and ``dog`` carries no class order).

    Parameters
    ----------
    names : list of str
        The column names, in file order.

    Returns
    -------
    ColumnNumbering or None
        None when the names carry no class numbers.

    Raises
    ------
    ValueError
        When two numbered names give the same class (``p_1`` and ``p_01``).

    Examples
    --------
    >>> numbering = number_columns(["p0", "p1", "p10", "p11", "p2"])
    >>> numbering.order, numbering.numbers
    ([0, 1, 4, 2, 3], [0, 1, 2, 10, 11])
    >>> number_columns(["cat", "dog"]) is None
    True
    >>> number_columns(["p_0", "p_1", "comment"]).strays
    [2]
    >>> number_columns(["class2_prob", "class1_prob"]).order
    [1, 0]
    """
    groups: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for position, name in enumerate(names):
        match = NUMBERED_NAME.match(name)
        if match:
            key = (match.group(1), match.group(3))
            groups.setdefault(key, []).append((int(match.group(2)), position))
    if not groups:
        return None
    # Ties go to the first group seen: max keeps the first of equal keys.
    (prefix, suffix), members = max(groups.items(), key=lambda item: len(item[1]))
    if len(members) < min(2, len(names)):
        return None
    numbers = [number for number, _ in members]
    if len(set(numbers)) != len(numbers):
        repeated = sorted({n for n in numbers if numbers.count(n) > 1})[0]
        same = [names[position] for number, position in members if number == repeated]
        raise ValueError(
            f"columns {', '.join(same)} both name class {repeated}; rename or drop one of them"
        )
    members.sort()
    numbered = {position for _, position in members}
    return ColumnNumbering(
        prefix=prefix,
        suffix=suffix,
        order=[position for _, position in members],
        numbers=[number for number, _ in members],
        strays=[position for position in range(len(names)) if position not in numbered],
    )


def names_logits(names: list[str]) -> bool:
    """Whether the names say that the values are logits: each starts with ``logit(s)``.

    Parameters
    ----------
    names : list of str
        Column names of a table, or one ``.npz`` key.

    Returns
    -------
    bool

    Examples
    --------
    >>> names_logits(["logit_0", "logit_1"]), names_logits(["logits"])
    (True, True)
    >>> names_logits(["p_0", "logit_1"]), names_logits(["logistic_score"])
    (False, False)
    """
    return bool(names) and all(_LOGIT_NAME.match(name) for name in names)


def label_affixes(names: list[str], labels) -> tuple[str, str] | None:
    """The prefix and suffix that every name puts around its class label, if there are ones.

    ``p_cat, p_dog`` with labels ``cat`` and ``dog`` are the classes between
    the prefix ``p_`` and an empty suffix; ``cat_prob, dog_prob`` have the
    suffix ``_prob``. The labels seen may be fewer than the columns (a split
    that misses a class), but each must be one of the names so stripped.

    Parameters
    ----------
    names : list of str
        The value columns' names.
    labels : array-like
        The labels of the rows (non-numeric).

    Returns
    -------
    (str, str) or None
        The shortest prefix and suffix (shared by every name) that leave
        distinct, non-empty class names among which every label is found;
        None when there are none (then the names do not say the classes).

    Examples
    --------
    >>> label_affixes(["p_cat", "p_dog", "p_eel"], ["dog", "cat"])
    ('p_', '')
    >>> label_affixes(["cat_prob", "dog_prob"], ["cat"])
    ('', '_prob')
    >>> label_affixes(["cat", "dog"], ["cat", "dog"])
    ('', '')
    >>> label_affixes(["p_cat", "p_dog"], ["eel"]) is None
    True
    """
    try:
        distinct = np.unique(np.asarray(labels))
    except TypeError:  # labels of mixed types: a missing label (NaN) among strings
        distinct = set(labels)
    # A missing label names no column; the probability check reports it by its row.
    wanted = {str(label) for label in distinct if not _missing(label)}
    if not names or not wanted:
        return None
    shortest = min(len(name) for name in names)
    prefix_length = len(_common_prefix(names))
    suffix_length = len(_common_prefix([name[::-1] for name in names]))
    # Fewest stripped characters first: the names themselves, when they are the classes.
    candidates = sorted(
        (
            (start, end)
            for start in range(prefix_length + 1)
            for end in range(suffix_length + 1)
            if start + end < shortest
        ),
        key=lambda pair: (pair[0] + pair[1], pair[0]),
    )
    for start, end in candidates:
        stripped = [name[start : len(name) - end] for name in names]
        if len(set(stripped)) == len(stripped) and wanted <= set(stripped):
            return names[0][:start], names[0][len(names[0]) - end :]
    return None


def _missing(label) -> bool:
    return label is None or (isinstance(label, float) and label != label)


def _common_prefix(names: list[str]) -> str:
    first, last = min(names), max(names)
    length = 0
    while length < min(len(first), len(last)) and first[length] == last[length]:
        length += 1
    return first[:length]


def pandas_index_columns(names: list[str]) -> list[str]:
    """The names that pandas gives to a header-less column (its default CSV index).

    Examples
    --------
    >>> pandas_index_columns(["Unnamed: 0", "p_0", "p_1"])
    ['Unnamed: 0']
    """
    return [name for name in names if _PANDAS_INDEX.match(name)]


def odd_column(values: np.ndarray, tolerance: float) -> int | None:
    """The one column without which ``values`` are probabilities, if there is one.

    Called on the error path only, when the rows of ``values`` are not
    probabilities: a single extra column (an identifier, a weight, a score)
    is the usual cause, and naming it is more useful than suggesting logits.

    Parameters
    ----------
    values : ndarray of shape (n, K)
        The table's value columns; only 3 <= K <= 100 is searched (each
        candidate costs a pass over the table).
    tolerance : float
        How far a row sum may be from 1.

    Returns
    -------
    int or None
        The position of the column, or None when no single column explains it.

    Examples
    --------
    >>> odd_column(np.array([[0.2, 7.0, 0.8], [0.5, 3.0, 0.5]]), 1e-6)
    1
    >>> odd_column(np.array([[2.0, 7.0, 0.8], [0.5, 3.0, 0.5]]), 1e-6) is None
    True
    """
    if values.ndim != 2 or not 3 <= values.shape[1] <= 100:
        return None
    row_sums = values.sum(axis=1)
    for column in range(values.shape[1]):
        rest = np.delete(values, column, axis=1)
        if not (rest.min() >= 0 and rest.max() <= 1):
            continue
        if np.all(np.abs(row_sums - values[:, column] - 1) <= tolerance):
            return column
    return None
