"""GGUF test assets, cached like every asset in tests/assets.py:

- `llamacpp_sdist()`: from the `llama-cpp-python` sdist, vendor/llama.cpp's converter (convert_hf_to_gguf.py with
  its `conversion/` package and its own `gguf-py`) and every `models/ggml-vocab-*` GGUF with its .inp/.out.
- `llamacpp_chat_templates()`: the sdist's models/templates/*.jinja (the chat templates llama.cpp ships, fetched
  from the models' repositories), kept in a cache directory of their own.
- `llamacpp_vocab_gguf(name)`: one of those vocabularies with its vectors (GGUF_VOCABS: every BPE or SPM
  vocabulary in the sdist that ships vectors).
- `smollm2_converted_gguf(outtype)`: SmolLM2-135M-Instruct converted from the Hugging Face directory
  (tests/assets.smollm2_dir) by llama.cpp's own converter, outtype "f32" or "q8_0".
- `convert_hf_dir(hf_dir, outfile, outtype)`: that converter on any Hugging Face directory (not cached).
- `llamacpp_vocab_source()`: the sdist's src/llama-vocab.cpp (llama.cpp's pre-tokenizer names, flags and regexes).
- `hf_tokenizer_of_vocab_gguf(name)`: transformers' tokenizer.json conversion of one of those vocab GGUFs (the
  Hugging Face peer of a SentencePiece-style GGUF such as phi-3's).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from tests.assets import (LLAMACPP_PACKAGE, VOCAB_TEST_SEPARATOR, AssetError, LlamaCppVocab, cache_root,
                          cached_dir, fetch_members, pip_download, smollm2_dir)

LLAMACPP_ROOT = "llama_cpp_python-0.3.36/vendor/llama.cpp/"
SDIST_PARTS = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/", "models/ggml-vocab-")
# vocabularies of the sdist with vectors whose tokenizer is BPE (gpt2) or SentencePiece (llama); the others
# (bert-bge: WordPiece, gemma-4: llama.cpp's own "gemma4" model) are tokenizers the GGUF
# reader does not implement
GGUF_VOCABS = ("command-r", "deepseek-coder", "deepseek-llm", "falcon", "gpt-2", "llama-bpe", "llama-spm", "mpt",
               "phi-3", "qwen2", "qwen35", "refact", "starcoder")
CONVERT_TIMEOUT_S = 900


def llamacpp_sdist() -> Path:
    """vendor/llama.cpp of the llama-cpp-python sdist, only the converter and the vocab models."""
    return cached_dir("llamacpp-sdist", _extract_sdist)


def _extract_sdist(out: Path) -> None:
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix=".download.") as scratch:
        archive = pip_download(LLAMACPP_PACKAGE, Path(scratch), sdist=True)
        try:
            with tarfile.open(archive, "r:*") as tf:
                for info in tf:
                    rel = info.name[len(LLAMACPP_ROOT):] if info.name.startswith(LLAMACPP_ROOT) else None
                    if rel and info.isfile() and rel.startswith(SDIST_PARTS) and ".." not in rel:
                        target = out / rel
                        target.parent.mkdir(parents=True, exist_ok=True)
                        with tf.extractfile(info) as src:
                            target.write_bytes(src.read())
        except (tarfile.TarError, OSError) as e:
            raise AssetError(f"{LLAMACPP_PACKAGE}: cannot unpack {archive.name}: {e}") from None
    if not (out / "convert_hf_to_gguf.py").is_file():
        raise AssetError(f"{LLAMACPP_PACKAGE}: the sdist has no vendor/llama.cpp/convert_hf_to_gguf.py")


def llamacpp_chat_templates() -> dict[str, str]:
    """file name -> text of every models/templates/*.jinja in the llama-cpp-python sdist (cached once; the
    sdist scripts/llama_cpp.sh keeps under the cache root is read when present, else it is downloaded)."""
    d = cached_dir("llamacpp-templates-v1", _extract_templates)
    templates = {p.name: p.read_text(encoding="utf-8") for p in sorted(d.glob("*.jinja"))}
    if not templates:
        raise AssetError(f"{LLAMACPP_PACKAGE}: no chat templates in {d}")
    return templates


def _extract_templates(out: Path) -> None:
    prefix = LLAMACPP_ROOT + "models/templates/"
    kept = cache_root() / "sdist" / f"{LLAMACPP_ROOT.split('/')[0]}.tar.gz"
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix=".download.") as scratch:
        archive = kept if kept.is_file() else pip_download(LLAMACPP_PACKAGE, Path(scratch), sdist=True)
        try:
            with tarfile.open(archive, "r:*") as tf:
                for info in tf:
                    name = info.name[len(prefix):] if info.name.startswith(prefix) else ""
                    if info.isfile() and name.endswith(".jinja") and "/" not in name:
                        with tf.extractfile(info) as src:
                            (out / name).write_bytes(src.read())
        except (tarfile.TarError, OSError) as e:
            raise AssetError(f"{LLAMACPP_PACKAGE}: cannot unpack {archive.name}: {e}") from None
    if not any(out.glob("*.jinja")):
        raise AssetError(f"{LLAMACPP_PACKAGE}: the sdist has no {prefix}*.jinja")


def llamacpp_vocab_gguf(name: str) -> LlamaCppVocab:
    if name not in GGUF_VOCABS:
        raise ValueError(f"unknown vocab {name!r}; known: {', '.join(GGUF_VOCABS)}")
    base = llamacpp_sdist() / "models" / f"ggml-vocab-{name}.gguf"
    inputs = Path(f"{base}.inp").read_text(encoding="utf-8").split(VOCAB_TEST_SEPARATOR)
    lines = Path(f"{base}.out").read_text(encoding="utf-8").split("\n")
    if len(lines) < len(inputs):
        raise AssetError(f"{LLAMACPP_PACKAGE}: {base.name}.inp/.out do not pair up")
    return LlamaCppVocab(name, base, inputs, [[int(t) for t in line.split()] for line in lines[:len(inputs)]])


def llamacpp_vocab_source() -> Path:
    """vendor/llama.cpp/src/llama-vocab.cpp of the same sdist, the source tokenizer/sources/gguf_pre.py transcribes."""
    member = f"{LLAMACPP_ROOT}src/llama-vocab.cpp"
    d = cached_dir("llamacpp-vocab-cpp", lambda tmp: fetch_members(LLAMACPP_PACKAGE, [member], tmp, sdist=True))
    return d / "llama-vocab.cpp"


def hf_tokenizer_of_vocab_gguf(name: str) -> Path:
    """A directory with transformers' tokenizer.json for vocab GGUF `name` (converted once)."""
    gguf = llamacpp_vocab_gguf(name).gguf

    def build(out: Path) -> None:
        staging = out / "gguf"   # transformers reads the GGUF from a directory of its own
        staging.mkdir()
        shutil.copy(gguf, staging / gguf.name)
        try:
            from transformers import AutoTokenizer

            AutoTokenizer.from_pretrained(staging, gguf_file=gguf.name).save_pretrained(out)
        except Exception as e:
            raise AssetError(f"{LLAMACPP_PACKAGE}: converting {gguf.name} with transformers failed: "
                             f"{type(e).__name__}: {e}") from e
        shutil.rmtree(staging)

    return cached_dir(f"hf-tokenizer-of-{name}", build)


def smollm2_converted_gguf(outtype: str) -> Path:
    """SmolLM2-135M-Instruct as llama.cpp's converter writes it ("f32", "bf16" or "q8_0")."""
    if outtype not in ("f32", "bf16", "q8_0"):
        raise ValueError(outtype)
    hf_dir, sdist = smollm2_dir(), llamacpp_sdist()
    name = f"SmolLM2-135M-Instruct-{outtype}.gguf"

    def build(out: Path) -> None:
        convert_hf_dir(hf_dir, out / name, outtype, sdist)

    return cached_dir(f"smollm2-gguf-{outtype}", build) / name


def convert_hf_dir(hf_dir: Path, outfile: Path, outtype: str = "f32", sdist: Path | None = None,
                   args: tuple[str, ...] = ()) -> Path:
    """Convert a Hugging Face directory with llama.cpp's own convert_hf_to_gguf.py (AssetError on failure);
    `args`: more converter options (e.g. "--no-mtp" for a Qwen3-Next / Qwen3.5 model without an MTP head)."""
    from tests import oracle_cache
    sdist = sdist or llamacpp_sdist()
    script = sdist / "convert_hf_to_gguf.py"

    def convert() -> None:
        env = {**os.environ, "NO_LOCAL_GGUF": ""}
        env.pop("NO_LOCAL_GGUF")   # the converter puts its own gguf-py first on sys.path unless this is set
        cmd = [sys.executable, str(script), str(hf_dir), "--outtype", outtype, "--outfile", str(outfile), *args]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CONVERT_TIMEOUT_S, env=env,
                                  cwd=outfile.parent)
        except subprocess.TimeoutExpired:
            raise AssetError(f"convert_hf_to_gguf.py --outtype {outtype} timed out") from None
        if proc.returncode != 0 or not outfile.is_file():
            tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
            raise AssetError(f"convert_hf_to_gguf.py --outtype {outtype} failed: {tail}")
    # the converter's output depends on its script, its gguf-py and the directory's bytes: asked once per change
    params = {"outtype": outtype, "args": list(args), "sdist": sdist.name,
              "converter": oracle_cache.inputs_digest([script, sdist / "gguf-py", sdist / "conversion"])}
    return oracle_cache.file_answer("converted", [hf_dir], params, outfile, convert)
