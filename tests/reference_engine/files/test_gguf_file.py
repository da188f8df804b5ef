"""Our GGUF header parser: agrees with gguf's GGUFReader on real files, and turns every malformed header into a
one-line ModelDirError (never another exception, never a huge allocation), including fuzzed bytes."""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from reference_engine.errors import ModelDirError, UnsupportedError
from reference_engine.files.gguf_config import gguf_raw_config
from reference_engine.files.gguf_file import GGUFFile, find_gguf
from reference_engine.files.gguf_weights import GGUFWeights, gguf_arch
from reference_engine.tokenizer.tokenizer import Tokenizer
from tests.checks.zoo_gguf import healthy


def gstr(s: bytes | str) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def raw_gguf(kvs: list[bytes] = (), tensors: list[bytes] = (), data: bytes = b"", version: int = 3,
             n_tensors: int | None = None, n_kv: int | None = None) -> bytes:
    """A GGUF file assembled by hand, for headers no writer would produce."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(tensors)
    pad = -len(body) % 32
    return body + b"\0" * pad + data


def kv_u32(key: str, value: int) -> bytes:
    return gstr(key) + struct.pack("<II", 4, value)


def tensor(name: str, dims: tuple[int, ...], ggml_type: int = 0, offset: int = 0) -> bytes:
    return gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<IQ", ggml_type, offset)


def opened(tmp_path, data: bytes) -> GGUFFile:
    path = tmp_path / "m.gguf"
    path.write_bytes(data)
    return GGUFFile.open(path)


def test_a_minimal_file_parses(tmp_path):
    g = opened(tmp_path, raw_gguf([kv_u32("a.b", 7)], [tensor("t", (4, 2))], data=b"\0" * 32))
    assert g.metadata == {"a.b": 7} and g.tensors["t"].shape == (2, 4) and g.tensors["t"].nbytes == 32


BAD = {
    "bad magic": b"GGUX" + b"\0" * 40,
    "too short": b"GGUF\3\0",
    "version 1": raw_gguf(version=1),
    "big endian": b"GGUF" + struct.pack(">IQQ", 3, 0, 0),
    "huge metadata count": raw_gguf(n_kv=2 ** 62),
    "huge tensor count": raw_gguf(n_tensors=2 ** 40),
    "string length past the end": raw_gguf([struct.pack("<Q", 2 ** 60) + b"key"]),
    "array count past the end": raw_gguf([gstr("k") + struct.pack("<IIQ", 9, 4, 2 ** 50)]),
    "unknown value type": raw_gguf([gstr("k") + struct.pack("<I", 99)]),
    "nested arrays": raw_gguf([gstr("k") + struct.pack("<IIQ", 9, 9, 1) + struct.pack("<IQ", 9, 1)
                               + struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 4, 0)]),
    "duplicate key": raw_gguf([kv_u32("k", 1), kv_u32("k", 2)]),
    "alignment not a power of two": raw_gguf([kv_u32("general.alignment", 24)]),
    "5 dimensions": raw_gguf(tensors=[tensor("t", (1, 1, 1, 1, 1))], data=b"\0" * 32),
    "unknown ggml type": raw_gguf(tensors=[tensor("t", (4,), 77)], data=b"\0" * 32),
    "row not a block multiple": raw_gguf(tensors=[tensor("t", (31,), 8)], data=b"\0" * 64),
    "misaligned offset": raw_gguf(tensors=[tensor("t", (4,), 0, 4)], data=b"\0" * 64),
    "tensor past the end": raw_gguf(tensors=[tensor("t", (1024,))], data=b"\0" * 32),
    "huge dims": raw_gguf(tensors=[tensor("t", (2 ** 40, 2 ** 20))], data=b"\0" * 32),
    "duplicate tensor": raw_gguf(tensors=[tensor("t", (4,)), tensor("t", (4,), 0, 32)], data=b"\0" * 64),
    "overlapping tensors": raw_gguf(tensors=[tensor("a", (16,)), tensor("b", (4,), 0, 32)], data=b"\0" * 96),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_malformed_headers_are_one_line_errors(tmp_path, case):
    with pytest.raises(ModelDirError) as info:
        opened(tmp_path, BAD[case])
    assert "\n" not in str(info.value)


def test_big_endian_is_unsupported_not_garbage(tmp_path):
    with pytest.raises(UnsupportedError, match="big-endian"):
        opened(tmp_path, BAD["big endian"])


def test_invalid_utf8_is_recorded_not_fatal(tmp_path):
    g = opened(tmp_path, raw_gguf([gstr("general.name") + struct.pack("<I", 8) + gstr(b"ok \xff")]))
    assert g.bad_utf8 == ["general.name"] and g.metadata["general.name"] == "ok \ufffd"


def test_block_sizes_are_ggufs_own():
    """One table: ggml type sizes are gguf's GGML_QUANT_SIZES (the kernels' own), not a copy that can drift.
    A Q8_1 block is 32 values in 40 bytes (two float16 scales d and s, then 32 int8); a hand copy said 36."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    from reference_engine.files.gguf_file import ggml_types
    assert ggml_types()[GGMLQuantizationType.Q8_1] == ("Q8_1", 32, 40)
    assert {k: v[1:] for k, v in ggml_types().items()} == {int(k): v for k, v in GGML_QUANT_SIZES.items()}


def test_q8_1_tensor_spans_40_bytes_per_block(tmp_path):
    # two Q8_1 blocks (64 values): 80 bytes of data; with 36-byte blocks the header would place 72
    g = opened(tmp_path, raw_gguf([], [tensor("t", (64,), ggml_type=9)], data=b"\0" * 96))
    assert g.tensors["t"].nbytes == 80 and g.tensors["t"].type_name == "Q8_1"
    with pytest.raises(ModelDirError, match="extends past the end"):
        opened(tmp_path, raw_gguf([], [tensor("t", (64,), ggml_type=9)], data=b"\0" * 72))


@pytest.mark.assets
def test_agrees_with_gguf_reader_on_the_real_file(smollm2_gguf):
    from gguf import GGUFReader
    ours, theirs = GGUFFile.open(smollm2_gguf), GGUFReader(smollm2_gguf)
    assert set(ours.metadata) == {f for f in theirs.fields if not f.startswith("GGUF.")}
    for name, field in theirs.fields.items():
        if not name.startswith("GGUF.") and name != "tokenizer.ggml.merges":
            assert ours.metadata[name] == field.contents(), name
    assert ours.metadata["tokenizer.ggml.merges"] == theirs.fields["tokenizer.ggml.merges"].contents()
    for t in theirs.tensors:
        mine = ours.tensors[t.name]
        assert (mine.dims, mine.ggml_type, mine.offset, mine.nbytes) == \
            (tuple(int(d) for d in t.shape), int(t.tensor_type), int(t.data_offset), int(t.n_bytes))


def test_find_gguf(tmp_path):
    assert find_gguf(tmp_path) is None
    path = healthy(tmp_path)
    assert find_gguf(tmp_path) == path and find_gguf(path) == path
    (tmp_path / "config.json").write_text("{}")
    assert find_gguf(tmp_path) is None   # a Hugging Face directory that also holds a GGUF stays HF


@pytest.fixture(scope="module")
def healthy_bytes(tmp_path_factory) -> bytes:
    return healthy(tmp_path_factory.mktemp("gguf")).read_bytes()


def load_everything(path) -> None:
    """What `check` builds from a GGUF; each may fail only with ModelDirError."""
    g = GGUFFile.open(path)
    gguf_raw_config(g)
    weights = GGUFWeights(g, gguf_arch(g))
    for name in weights.names[:3]:
        weights.get(name)
    Tokenizer.from_gguf(g).encode("Hello world")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_bytes_never_crash(healthy_bytes, tmp_path, data):
    blob = bytearray(healthy_bytes)
    kind = data.draw(st.sampled_from(["truncate", "flip", "count"]))
    if kind == "truncate":
        blob = blob[:data.draw(st.integers(0, len(blob) - 1))]
    elif kind == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            at = data.draw(st.integers(0, min(len(blob), 40_000) - 1))   # the header and metadata region
            blob[at] ^= 1 << data.draw(st.integers(0, 7))
    else:
        at = data.draw(st.sampled_from([8, 16]))
        blob[at:at + 8] = struct.pack("<Q", data.draw(st.sampled_from([2 ** 63 - 1, 2 ** 32, 10 ** 6, 0])))
    path = tmp_path / "fuzz.gguf"
    path.write_bytes(bytes(blob))
    try:
        load_everything(path)
    except ModelDirError as e:
        assert "\n" not in str(e)
