"""reliacal.datasets.load_wordnet_glosses on a committed excerpt of WordNet 3.0."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from reliacal.datasets import load_wordnet_glosses

EXCERPT = Path(__file__).parent / "data" / "wordnet"
INSTALLED = Path("/usr/share/wordnet/data.noun")


def test_noun_excerpt_by_hand():
    glosses = load_wordnet_glosses("noun", wordnet_dir=EXCERPT)
    # 69 lines, of which the first 29 are the licence.
    assert len(glosses.data) == len(glosses.target) == len(glosses.lemmas) == 40
    assert len(glosses.target_names) == 26
    assert glosses.target_names[0] == "noun.Tops" and glosses.target_names[-1] == "noun.time"
    # The synset 02084071 is read by hand from the file: "02084071 05 n 03 dog 0 ...".
    row = list(glosses.offsets).index(2084071)
    assert glosses.lemmas[row] == "dog"
    assert glosses.target_names[glosses.target[row]] == "noun.animal"
    assert glosses.data[row].startswith("a member of the genus Canis")
    assert glosses.data[0].startswith("that which is perceived or known")
    # Counts per category, as `awk 'NR>29{print $2}' data.noun | sort | uniq -c` gives them.
    counts = dict(zip(*np.unique(glosses.target, return_counts=True), strict=True))
    names = {glosses.target_names[i]: int(n) for i, n in counts.items()}
    assert names == {
        "noun.Tops": 8,
        "noun.act": 2,
        "noun.animal": 3,
        "noun.artifact": 5,
        "noun.attribute": 1,
        "noun.body": 1,
        "noun.cognition": 1,
        "noun.communication": 2,
        "noun.food": 2,
        "noun.group": 1,
        "noun.location": 1,
        "noun.person": 5,
        "noun.plant": 3,
        "noun.possession": 1,
        "noun.process": 1,
        "noun.state": 2,
        "noun.substance": 1,
    }
    X, y = load_wordnet_glosses(wordnet_dir=EXCERPT, return_X_y=True)
    assert X == glosses.data and np.array_equal(y, glosses.target)
    assert "Princeton University" in glosses.DESCR


def test_adjective_excerpt():
    glosses = load_wordnet_glosses("adj", wordnet_dir=str(EXCERPT))
    assert glosses.target_names == ["adj.all", "adj.pert", "adj.ppl"]
    assert np.bincount(glosses.target).tolist() == [25, 3, 2]
    assert glosses.lemmas[0] == "able"


def test_missing_files_name_the_package(tmp_path):
    with pytest.raises(FileNotFoundError, match="apt-get install wordnet-base"):
        load_wordnet_glosses("noun", wordnet_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="wordnet_dir"):
        load_wordnet_glosses("verb", wordnet_dir=EXCERPT)


def test_bad_pos_and_bad_lines(tmp_path):
    with pytest.raises(ValueError, match="pos must be one of"):
        load_wordnet_glosses("nouns", wordnet_dir=EXCERPT)
    (tmp_path / "data.noun").write_text("00001740 03 n 01 entity 0 000 | a thing\nnot a line\n")
    with pytest.raises(ValueError, match=r"data.noun:2: not a WordNet synset line"):
        load_wordnet_glosses("noun", wordnet_dir=tmp_path)
    # A verb category in the noun file.
    (tmp_path / "data.noun").write_text("00001740 29 n 01 groom 0 000 | to tidy\n")
    with pytest.raises(ValueError, match="verb.body in data.noun"):
        load_wordnet_glosses("noun", wordnet_dir=tmp_path)


@pytest.mark.skipif(not INSTALLED.is_file(), reason="wordnet-base is not installed")
def test_installed_nouns_match_the_published_counts():
    """82,115 noun synsets in 26 categories, the smallest 42, the largest 11,587 (issue 14)."""
    glosses = load_wordnet_glosses("noun")
    counts = np.bincount(glosses.target, minlength=26)
    assert len(glosses.data) == 82115 and len(counts) == 26
    assert counts.min() == 42 and counts.max() == 11587
