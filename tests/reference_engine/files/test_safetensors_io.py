"""Our safetensors validator against a corpus of corrupted files, with the `safetensors` package as the oracle."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.torch import save_file

from reference_engine.errors import ModelDirError
from reference_engine.files.safetensors_io import DTYPE_BITS, MAX_HEADER_BYTES, read_header, validate_file

# Rules where the format text is stricter than the `safetensors` package, which we follow.
STRICTER_THAN_ORACLE = ("duplicate key", "does not start with '{'")


def pack(header: dict | bytes, data: bytes = b"") -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def write(tmp_path: Path, content: bytes, name: str = "x.safetensors") -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def oracle_accepts(path: Path) -> bool:
    try:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                f.get_slice(name).get_shape()
        return True
    except Exception:
        return False


@pytest.fixture(scope="module")
def valid_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("st") / "valid.safetensors"
    tensors = {"emb": torch.arange(12, dtype=torch.float32).reshape(3, 4), "bias": torch.ones(5, dtype=torch.bfloat16),
               "ids": torch.arange(3, dtype=torch.int64), "empty": torch.zeros(0, 4)}
    save_file(tensors, str(path), metadata={"format": "pt"})
    return path


def test_valid_file_parses_like_the_oracle(valid_file):
    header = read_header(valid_file)
    assert validate_file(valid_file) == []
    assert header.metadata == {"format": "pt"}
    assert header.data_start + sum(t.nbytes for t in header.tensors.values()) == valid_file.stat().st_size
    with safe_open(str(valid_file), framework="pt") as f:
        assert set(f.keys()) == set(header.tensors)
        for name, t in header.tensors.items():
            assert list(f.get_slice(name).get_shape()) == list(t.shape)
            assert f.get_slice(name).get_dtype() == t.dtype


def region_cut_points(path: Path) -> list[int]:
    """Every region boundary of the file and a point inside each region."""
    header = read_header(path)
    points = {0, 1, 4, 7, 8, 9, 8 + header.header_len // 2, header.data_start - 1, header.data_start}
    for t in header.tensors.values():
        start, end = header.data_start + t.start, header.data_start + t.end
        points |= {start, end, (start + end) // 2, end - 1}
    size = path.stat().st_size
    return sorted(p for p in points if 0 <= p < size)


def test_truncation_at_every_region_boundary_is_rejected_precisely(valid_file, tmp_path):
    content, data_start = valid_file.read_bytes(), read_header(valid_file).data_start
    for cut in region_cut_points(valid_file):
        bad = write(tmp_path, content[:cut])
        problems = validate_file(bad)
        assert problems, f"truncation at {cut} accepted"
        with pytest.raises(ModelDirError) as err:
            read_header(bad)
        assert str(err.value).startswith(str(bad) + ": ") and "\n" not in str(err.value)
        if cut < 8:
            assert "too short for the 8-byte header length" in problems[0]
        elif cut < data_start:
            assert "declared header length" in problems[0] and "truncated" in problems[0]
        else:
            assert problems[0].startswith("tensor '") and "file truncated?" in problems[0]
        assert not oracle_accepts(bad)


def assert_verdict_is_sound(path: Path) -> list[str]:
    """Our verdict on a corrupted file: never a crash, never more lenient than the oracle, and stricter
    only on the rules listed in STRICTER_THAN_ORACLE."""
    problems = validate_file(path)
    if problems == []:
        assert oracle_accepts(path)
        read_header(path)
    else:
        with pytest.raises(ModelDirError):
            read_header(path)
        if oracle_accepts(path):
            assert any(rule in problems[0] for rule in STRICTER_THAN_ORACLE), problems
    return problems


def test_every_flipped_header_byte_is_judged_soundly(valid_file, tmp_path):
    content = valid_file.read_bytes()
    rejected = 0
    for pos in range(read_header(valid_file).data_start):
        for mask in (0x01, 0x20, 0x80):
            flipped = bytearray(content)
            flipped[pos] ^= mask
            rejected += bool(assert_verdict_is_sound(write(tmp_path, bytes(flipped))))
    assert rejected > read_header(valid_file).data_start  # most flips break the file, and are caught


CORRUPTIONS = {
    "ten_gb_header": (struct.pack("<Q", 10 * 1024**3) + b"{}", "exceeds the limit of 100000000"),
    "header_past_eof": (struct.pack("<Q", 500) + b"{}", "only 2 bytes follow"),
    "not_utf8": (pack(b'{"a\xff":{}}'), "not UTF-8"),
    "not_json": (pack(b"{not json}"), "not valid JSON"),
    "json_array": (pack(b"[1, 2, 3]"), "does not start with '{'"),
    "json_object_then_garbage": (pack(b'{}garbage'), "not valid JSON"),
    "unknown_dtype": (pack({"a": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}}, bytes(4)),
                      "tensor 'a': unknown dtype 'F33'"),
    "negative_dim": (pack({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, bytes(4)),
                     "tensor 'a': shape must be a list of non-negative integers"),
    "bool_dim": (pack({"a": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, bytes(4)),
                 "tensor 'a': shape must be"),
    "float_offsets": (pack({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4.0]}}, bytes(4)),
                      "tensor 'a': data_offsets must be two non-negative integers"),
    "three_offsets": (pack({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}}, bytes(4)),
                      "tensor 'a': data_offsets must be two"),
    "begin_after_end": (pack({"a": {"dtype": "F32", "shape": [0], "data_offsets": [4, 0]}}, bytes(4)),
                        "tensor 'a': data_offsets begin 4 > end 0"),
    "span_mismatch": (pack({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}}, bytes(20)),
                      "tensor 'a': byte span 20 (offsets 0..20) does not match shape [2, 3] x F32 = 24 bytes"),
    "overflow": (pack({"a": {"dtype": "F64", "shape": [2**32, 2**32, 2**8], "data_offsets": [0, 8]}}, bytes(8)),
                 "overflows 64-bit size"),
    "offset_beyond_u64": (pack({"a": {"dtype": "U8", "shape": [1], "data_offsets": [2**64, 2**64 + 1]}}, bytes(1)),
                          "data_offsets must be two non-negative integers"),
    "overlap": (pack({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12)),
                "tensor 'b': data offsets 4..12 overlap tensor 'a' (which ends at 8)"),
    "gap": (pack({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                  "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}, bytes(12)),
            "tensor 'b': gap of 4 bytes before it"),
    "not_from_zero": (pack({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8)),
                      "tensor 'a': gap of 4 bytes"),
    "trailing_data": (pack({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, bytes(6)),
                      "2 trailing bytes belong to no tensor"),
    "past_end": (pack({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8)),
                 "tensor 'a': data offsets 0..16 run past the end of the data region (8 bytes"),
    "entry_not_object": (pack({"a": [1, 2]}), "tensor 'a': entry must be an object"),
    "entry_missing_fields": (pack({"a": {"dtype": "F32"}}), "tensor 'a': missing shape, data_offsets"),
    "metadata_not_strings": (pack({"__metadata__": {"format": 1}}),
                             "'__metadata__' value of 'format' must be a string"),
    "metadata_not_object": (pack({"__metadata__": [1]}), "'__metadata__' must be an object"),
    "duplicate_key": (pack(b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                           b'"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', bytes(1)), "duplicate key 'a'"),
    "deep_nesting": (pack(b"{" + b'"a":' * 1 + b"[" * 100_000 + b"]" * 100_000 + b"}"), "nested too deeply"),
    "tiny_header": (struct.pack("<Q", 1) + b"{", "too short for a JSON object"),
    "sub_byte_shape": (pack({"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, bytes(2)),
                       "12 bits, not a whole number of bytes"),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corrupted_file_is_rejected_with_a_precise_one_line_error(tmp_path, case):
    content, expected = CORRUPTIONS[case]
    path = write(tmp_path, content)
    problems = validate_file(path)
    assert problems and expected in problems[0], problems
    with pytest.raises(ModelDirError) as err:
        read_header(path)
    assert str(err.value).startswith(f"{path}: {problems[0]}") and "\n" not in str(err.value)
    if not any(rule in problems[0] for rule in STRICTER_THAN_ORACLE):
        assert not oracle_accepts(path)


def test_max_header_bound_matches_the_format():
    assert MAX_HEADER_BYTES == 100_000_000


def test_all_problems_are_reported_not_only_the_first(tmp_path):
    header = {"a": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]},
              "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 4]}}
    problems = validate_file(write(tmp_path, pack(header, bytes(4))))
    assert any("tensor 'a'" in p for p in problems) and any("tensor 'b'" in p for p in problems)


def test_missing_file_is_a_problem_not_a_crash(tmp_path):
    assert "cannot read" in validate_file(tmp_path / "nope.safetensors")[0]
    with pytest.raises(ModelDirError, match="nope.safetensors: cannot read"):
        read_header(tmp_path / "nope.safetensors")


def test_every_known_dtype_round_trips_through_a_header(tmp_path):
    offset, header = 0, {}
    for dtype, bits in sorted(DTYPE_BITS.items()):
        header[dtype] = {"dtype": dtype, "shape": [8], "data_offsets": [offset, offset + bits]}  # 8 x bits / 8
        offset += bits
    path = write(tmp_path, pack(header, bytes(offset)))
    assert validate_file(path) == []
    assert {t.dtype for t in read_header(path).tensors.values()} == set(DTYPE_BITS)


def test_a_ten_gb_declared_header_reads_only_eight_bytes(tmp_path, monkeypatch):
    import tracemalloc

    path = write(tmp_path, struct.pack("<Q", 10 * 1024**3) + bytes(64))
    tracemalloc.start()
    validate_file(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 * 1024


# --------------------------------------------------------------------------- hypothesis

DTYPES = st.sampled_from(sorted(d for d, bits in DTYPE_BITS.items() if bits >= 8))


@st.composite
def headers(draw):
    """A header dict and its data size; sometimes valid, sometimes with one span nudged."""
    n = draw(st.integers(0, 5))
    header, offset = {}, 0
    for i in range(n):
        dtype = draw(DTYPES)
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        nbytes = DTYPE_BITS[dtype] // 8 * int(torch.tensor(shape).prod()) if shape else DTYPE_BITS[dtype] // 8
        header[f"w{i}"] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    if draw(st.booleans()) and header:
        victim = header[draw(st.sampled_from(sorted(header)))]
        which = draw(st.integers(0, 1))
        victim["data_offsets"][which] = max(0, victim["data_offsets"][which] + draw(st.integers(-3, 3)))
    data_size = max(0, offset + draw(st.sampled_from([0, 0, 0, -1, 1, 7])))
    if draw(st.booleans()):
        header["__metadata__"] = draw(st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2))
    return header, data_size


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=headers())
def test_generated_headers_agree_with_the_oracle(tmp_path, case):
    header, data_size = case
    path = write(tmp_path, pack(header, bytes(data_size)))
    problems = validate_file(path)
    assert (problems == []) == oracle_accepts(path), problems


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_byte_corruption_never_crashes_and_never_accepts_what_the_oracle_rejects(tmp_path, valid_file, data):
    content = bytearray(valid_file.read_bytes())
    header_end = read_header(valid_file).data_start
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, header_end - 1))
        content[pos] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        content = content[:data.draw(st.integers(0, len(content)))]
    assert_verdict_is_sound(write(tmp_path, bytes(content)))
