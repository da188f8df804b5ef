"""SmolLM2 GGUF variants that reproduce serving incidents, and llama-cpp-python's server, for the live tests.

Each variant is the cached SmolLM2-135M-Instruct Q4_1 GGUF (tests/assets.py) rewritten with gguf's GGUFWriter:
metadata changed, tensors copied (or requantized), cached under ~/.cache/llmdoctor/endpoint-ggufs-v1/.

- `broken-stop`: token 2 (<|im_end|>) renamed <|turn_end|> in the vocabulary and the template, EOS set to 0
  (<|endoftext|>). llama.cpp ends generation on any token whose TEXT is <|im_end|> whatever eos_token_id says,
  so the rename is what makes the server really run on past the answer.
- `pre-default`: tokenizer.ggml.pre = "default" (llama.cpp #7724: the GGUF forgot its pre-tokenizer).
- `double-bos`: tokenizer.ggml.add_bos_token = true while the template writes <|im_start|> (= BOS) itself.
- `q4_0`: every Q4_1 tensor requantized to Q4_0 (numeric drift against the float32 reference).

`LlamaServer` runs `python -m llama_cpp.server` on 127.0.0.1 on a free port and waits until /v1/models answers.
The llama-cpp-python[server] package is installed by scripts/setup.sh --test (scripts/llama_cpp.sh builds its wheel
once into ~/.cache/llmdoctor/wheels, from the llama.cpp compile llama-server uses too); a missing install is a test
failure naming that script.
"""
from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.assets import AssetError, cached_dir, smollm2_gguf

VARIANTS = ("broken-stop", "pre-default", "double-bos", "q4_0")
SERVER_START_TIMEOUT_S = 180


def variant_gguf(name: str) -> Path:
    """The SmolLM2 GGUF rewritten as variant `name` (see the module docstring)."""
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}")
    source = smollm2_gguf()
    d = cached_dir(f"endpoint-gguf-v1-{name}", lambda tmp: _write_variant(name, source, tmp / f"smollm2-{name}.gguf"))
    return d / f"smollm2-{name}.gguf"


def _write_variant(name: str, source: Path, out: Path) -> None:
    try:
        from gguf import GGMLQuantizationType, GGUFReader
        reader = GGUFReader(source)
        overrides, requantize = {}, None
        if name == "broken-stop":
            tokens = list(reader.fields["tokenizer.ggml.tokens"].contents())
            assert tokens[2] == "<|im_end|>", tokens[2]
            tokens[2] = "<|turn_end|>"
            template = reader.fields["tokenizer.chat_template"].contents().replace("<|im_end|>", "<|turn_end|>")
            overrides = {"tokenizer.ggml.tokens": tokens, "tokenizer.chat_template": template,
                         "tokenizer.ggml.eos_token_id": 0, "tokenizer.ggml.padding_token_id": 0}
        elif name == "pre-default":
            overrides = {"tokenizer.ggml.pre": "default"}
        elif name == "double-bos":
            overrides = {"tokenizer.ggml.add_bos_token": True}
        elif name == "q4_0":
            requantize = (GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q4_0)
        copy_gguf(reader, out, overrides, requantize)
    except AssetError:
        raise
    except Exception as e:
        raise AssetError(f"building the {name} GGUF variant from {source.name} failed: {type(e).__name__}: {e}") from e


def copy_gguf(reader, out: Path, overrides: dict, requantize=None) -> None:
    """Write reader's GGUF to `out` with metadata `overrides` (same value types) and optionally requantize
    tensors of type requantize[0] to requantize[1]."""
    import numpy as np
    from gguf import GGUFValueType, GGUFWriter
    from gguf.quants import dequantize, quantize
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(out, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, overrides.get(field.name, field.contents()), vtype, sub_type=sub_type)
    tensors = []
    for t in reader.tensors:
        data, qtype = t.data, t.tensor_type
        if requantize and qtype == requantize[0]:
            shape = [int(x) for x in reversed(t.shape)]              # numpy order
            data = quantize(dequantize(t.data, qtype).reshape(shape).astype(np.float32), requantize[1])
            qtype = requantize[1]
        tensors.append((t.name, data, qtype))
        writer.add_tensor_info(t.name, data.shape, data.dtype, data.nbytes, qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, data, _ in tensors:
        writer.write_tensor_data(data)
    writer.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# `python -m llama_cpp.server` with llama.cpp's extra CPU buffer types off (use_extra_bufts = False): in
# llama-cpp-python 0.3.36 a prompt of more than a few tokens segfaults in llama_decode on CPUs with AMX (the
# AMX/repacked Q4 buffers; seen on an AMX Xeon, fine on AVX2-only CPUs). The plain CPU kernels give the same
# tokens; the server's own code is unchanged.
SERVER_MAIN = """
import llama_cpp.llama_cpp as lib
_defaults = lib.llama_model_default_params
def _params():
    params = _defaults()
    params.use_extra_bufts = False
    return params
lib.llama_model_default_params = _params
from llama_cpp.server.__main__ import main
main()
"""


RUNNING: set["ServerProcess"] = set()     # started and not yet stopped: what a session must not leave behind
LAUNCHED: list[tuple[subprocess.Popen, str]] = []   # every process launched, whatever became of its object


def stop_all() -> None:
    """Stop every server still running (the session's end, atexit, an interrupt), and the process group of any
    process launched that is still alive."""
    for server in list(RUNNING):
        server.stop()
    for proc, _ in LAUNCHED:
        if proc.poll() is None:
            _stop_group(proc)


def leftovers() -> list[str]:
    """The launched server processes still running, one line each (pid, name, port)."""
    return [f"pid {proc.pid} {what}" for proc, what in LAUNCHED if proc.poll() is None]


atexit.register(stop_all)


class ServerProcess:
    """A server process on 127.0.0.1 with its log in a temporary file; stopped by stop() (or as a context manager).
    Subclasses build the command line in start() and wait for it with wait_ready(). The server runs in a process
    group of its own (start_new_session), and stop() kills the whole group: whatever the server started goes
    with it, and a Ctrl-C in the terminal does not reach it before the fixture's teardown does."""
    name = "server"

    def __init__(self, gguf: Path, *args: str):
        self.gguf, self.args = gguf, args
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(tempfile.mkstemp(prefix=f"{self.name}-", suffix=".log")[1])
        self.proc: subprocess.Popen | None = None

    def launch(self, cmd: list[str], env: dict) -> None:
        if self.alive():     # a second process on the same port would die, and the first would be lost
            raise RuntimeError(f"{self.name} on port {self.port} is already running (pid {self.proc.pid})")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        RUNNING.add(self)
        LAUNCHED.append((self.proc, f"{self.name} on port {self.port} ({self.gguf})"))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, path: str, ok: tuple[int, ...], timeout_s: float, poll_s: float) -> None:
        """Poll GET url+path until its status is in `ok`; AssetError with the log's tail if the process exits or
        the time runs out."""
        import httpx
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssetError(f"{self.name} exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                if httpx.get(f"{self.url}{path}", timeout=2).status_code in ok:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(poll_s)
        self.stop()
        raise AssetError(f"{self.name} did not answer within {timeout_s} s: {self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        return " | ".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after 20 s; the group is killed even when the server
        itself already exited (a child it left)."""
        RUNNING.discard(self)
        if self.proc is not None:
            _stop_group(self.proc)

    def __enter__(self):
        # `with or_fail(Server(...).start) as s` enters a server already started: starting it again (as this did)
        # launched a second process on the same port, which died, and the first was never stopped
        return self if self.alive() else self.start()

    def __exit__(self, *exc):
        self.stop()


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group `proc` leads, SIGKILL to what is left after 20 s."""
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class LlamaServer(ServerProcess):
    """llama-cpp-python's OpenAI-compatible server on 127.0.0.1."""
    name = "llama_cpp.server"

    def start(self) -> "LlamaServer":
        try:
            import llama_cpp.server  # noqa: F401
        except ImportError as e:
            raise AssetError(f"llama-cpp-python[server] is not installed ({e}): run scripts/setup.sh --test "
                             f"(it builds the wheel once into ~/.cache/llmdoctor/wheels)") from None
        cmd = [sys.executable, "-c", SERVER_MAIN, "--model", str(self.gguf), "--host", "127.0.0.1",
               "--port", str(self.port), "--n_ctx", "2048", "--n_threads", "1", "--n_threads_batch", "1", *self.args]
        # one thread: on a loaded 2-core box ggml worker threads spinning at a barrier make decoding ~20x slower
        self.launch(cmd, {**os.environ, "OMP_NUM_THREADS": "1"})
        self.wait_ready("/v1/models", (200, 401), SERVER_START_TIMEOUT_S, 0.5)   # 401: --api_key
        return self
