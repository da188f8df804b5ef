"""--select/--ignore like ruff: ids, prefixes, categories, ALL; the more specific selector wins."""
from __future__ import annotations

import pytest

from checks.catalogue.registry import make_spec
from llmdoctor.run.selection import SelectionError, parse_selectors, select_checks


def _spec(ident: str, category: str):
    def func(ctx):
        """Summary."""
    return make_spec(func, ident, category, "error", (), "")


SPECS = [_spec("VOC001", "vocab"), _spec("VOC002", "vocab"), _spec("VOC011", "vocab"),
         _spec("TOK001", "tokenizer"), _spec("GPU001", "gpu")]


@pytest.mark.parametrize("select, ignore, expected", [
    (None, None, ["VOC001", "VOC002", "VOC011", "TOK001", "GPU001"]),
    (["ALL"], None, ["VOC001", "VOC002", "VOC011", "TOK001", "GPU001"]),
    (["VOC001"], None, ["VOC001"]),
    (["voc001"], None, ["VOC001"]),
    (["VOC"], None, ["VOC001", "VOC002", "VOC011"]),
    (["VOC00"], None, ["VOC001", "VOC002"]),
    (["vocab", "GPU"], None, ["VOC001", "VOC002", "VOC011", "GPU001"]),
    (None, ["gpu"], ["VOC001", "VOC002", "VOC011", "TOK001"]),
    (["VOC"], ["VOC002"], ["VOC001", "VOC011"]),
    (["VOC002"], ["VOC"], ["VOC002"]),           # the more specific select wins over a broader ignore
    (["vocab"], ["VOC"], []),                    # same specificity: ignore wins
    (["VOC001"], ["VOC001"], []),
    (["ALL"], ["ALL"], []),
    (["DRF"], None, []),                         # a known family with no check yet is not an error
])
def test_selection(select, ignore, expected):
    assert [s.id for s in select_checks(SPECS, select, ignore)] == expected


@pytest.mark.parametrize("bad", ["VOCAB1", "nonsense", "XYZ", "VOC0001"])
def test_unknown_selector_is_an_error(bad):
    with pytest.raises(SelectionError, match="unknown selector"):
        select_checks(SPECS, [bad])
    with pytest.raises(SelectionError):
        select_checks(SPECS, None, [bad])


def test_parse_selectors_accepts_commas_and_repeats():
    assert parse_selectors(("VOC, tokenizer", "GPU001")) == ["VOC", "tokenizer", "GPU001"]
    assert parse_selectors("A,,B") == ["A", "B"] and parse_selectors(None) == []
