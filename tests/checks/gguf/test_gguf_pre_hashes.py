"""checks/gguf/pre_hashes.py against its source: get_vocab_base_pre in the converter of the llama-cpp-python
sdist. The function is a chain of plain `if chkhsh == ...: res = ...` statements, so a hash listed twice ends with
the LATER name; the table must be what replaying that chain gives, hash for hash."""
from __future__ import annotations

import ast

import pytest

from checks.gguf.pre_hashes import CHECK_TEXT, KNOWN_HASHES
from tests import assets_gguf
from tests.conftest import _asset

MPT_OLMO = "b6dc8df998e1cfbdc4eac8243701a65afe638679230920b50d6f17d81c098166"
BGE_JINA = "0876d13b50744004aa9aeae05e7b0647eac9d801b5ba4668afc01e709c15e19f"


def test_the_two_hashes_llama_cpp_lists_twice_keep_the_name_the_converter_writes():
    # mpt-7b and OLMo-1.7 hash the same, as do bge-small-en and jina-v2-base-en; the converter's later `if` wins
    assert KNOWN_HASHES[MPT_OLMO] == "olmo"
    assert KNOWN_HASHES[BGE_JINA] == "jina-v2-en"


def replay_chain(source: str) -> tuple[str, list[tuple[str, str]]]:
    """(chktxt, [(hash, name) in the order of the chain]) from get_vocab_base_pre's body."""
    function = next(node for node in ast.walk(ast.parse(source))
                    if isinstance(node, ast.FunctionDef) and node.name == "get_vocab_base_pre")
    text, chain = None, []
    for statement in function.body:
        if isinstance(statement, ast.Assign) and getattr(statement.targets[0], "id", None) == "chktxt":
            text = ast.literal_eval(statement.value)
        if not isinstance(statement, ast.If) or not isinstance(statement.test, ast.Compare):
            continue
        test = statement.test
        if getattr(test.left, "id", None) == "chkhsh":
            assert not statement.orelse, "the chain grew an elif/else: the first match would win, not the last"
            for inner in statement.body:
                if isinstance(inner, ast.Assign) and getattr(inner.targets[0], "id", None) == "res":
                    chain.append((test.comparators[0].value, ast.literal_eval(inner.value)))
    return text, chain


@pytest.mark.assets
def test_table_is_what_the_converter_chain_gives():
    source = (_asset(assets_gguf.llamacpp_sdist) / "conversion" / "base.py").read_text(encoding="utf-8")
    text, chain = replay_chain(source)
    assert text == CHECK_TEXT
    last_wins = {}
    for digest, name in chain:
        last_wins[digest] = name
    assert len(chain) > len(last_wins), "the sdist no longer repeats a hash; the test above may be stale"
    assert KNOWN_HASHES == last_wins
