"""Servers that take minutes to start, launched ONCE per test session, in the background, and shared by every
process of the session (both xdist workers under `-n 2`).

vLLM's CPU server spends its first one to two minutes importing Python (far longer on a loaded box: 13-22 min
were seen beside a busy suite); a test that started it when it first needed it would wait all that time. So the
collection hook (tests/conftest.py pytest_collection_finish) launches every registered server whose fixture
a collected test asks for, at once, from a thread (building its model directory may take a while the first time),
and the tests that need it wait for it only when they run.

The session's processes share one state directory, made by the process that owns the session (the xdist
controller, or the one pytest process) and passed to its workers in the environment (STATE_ENV). In it, for each
server: `NAME.lock` (created exclusively: the first process to collect the test launches, the others do not) and
`NAME.json` ({pid, url, log} or {error}), written whole. The owner stops them all at the session's end
(stop_all, from pytest_sessionfinish), their process groups killed; one still running after that is reported as a
leftover and fails the session like any other (tests/conftest.py).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tests.assets import AssetError

STATE_ENV = "LLMDOCTOR_SESSION_SERVERS"


@dataclass(frozen=True)
class Launch:
    """How to start one server: its command, environment and the route that answers 200 once it serves."""
    cmd: list[str]
    env: dict
    ready_path: str = "/health"


@dataclass(frozen=True)
class Running:
    """A session server that answers: its URL, process id (the leader of its process group) and log file."""
    url: str
    pid: int
    log: str


# fixture name -> launcher(port) -> Launch; a module registers its servers when tests/conftest.py imports it
LAUNCHERS: dict[str, Callable[[int], Launch]] = {}
_THREADS: list[threading.Thread] = []


def register(fixture: str, launcher: Callable[[int], Launch]) -> None:
    LAUNCHERS[fixture] = launcher


def make_state_dir() -> Path:
    """The session owner's state directory, handed to the workers (and to nothing else) in the environment."""
    state = Path(tempfile.mkdtemp(prefix="llmdoctor-session-servers-"))
    os.environ[STATE_ENV] = str(state)
    return state


def state_dir() -> Path | None:
    value = os.environ.get(STATE_ENV)
    return Path(value) if value else None


def launch_wanted(fixture_names: set[str]) -> None:
    """Launch, in the background, every registered server one of `fixture_names` asks for and that no process
    of the session has launched yet."""
    state = state_dir()
    if state is None:
        return
    for fixture, launcher in LAUNCHERS.items():
        if fixture not in fixture_names:
            continue
        try:
            os.close(os.open(state / f"{fixture}.lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            continue        # another process of the session launched it
        thread = threading.Thread(target=_launch, args=(state, fixture, launcher), daemon=True)
        thread.start()
        _THREADS.append(thread)


def _free_port() -> int:
    from tests.endpoint_assets import free_port
    return free_port()


def _launch(state: Path, fixture: str, launcher: Callable[[int], Launch]) -> None:
    try:
        port = _free_port()
        launch = launcher(port)
        log = state / f"{fixture}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(launch.cmd, stdout=out, stderr=subprocess.STDOUT, env=launch.env,
                                    start_new_session=True)
        record = {"pid": proc.pid, "url": f"http://127.0.0.1:{port}", "log": str(log),
                  "ready_path": launch.ready_path, "launched_at": time.time()}
    except Exception as e:      # the tests that wait for it fail with this line
        record = {"error": f"{type(e).__name__}: {e}"}
    _write(state / f"{fixture}.json", record)


def _write(path: Path, record: dict) -> None:
    tmp = path.with_suffix(".part")
    tmp.write_text(json.dumps(record))
    tmp.rename(path)


def join_launches(timeout_s: float = 600) -> None:
    """Wait for this process's launch threads (a process must not end while one is still starting a server)."""
    for thread in _THREADS:
        thread.join(timeout_s)


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def log_tail(record: dict, lines: int = 15) -> str:
    try:
        text = Path(record["log"]).read_text(errors="replace")
    except (KeyError, OSError):
        return "(no log)"
    return " | ".join(text.splitlines()[-lines:])


def wait_for(fixture: str, timeout_s: float) -> Running:
    """`fixture`'s server once it answers its ready route; AssetError with the
    reason (not launched, launch failed, exited, not ready in time) otherwise."""
    import httpx
    state = state_dir()
    if state is None or not (state / f"{fixture}.lock").exists():
        raise AssetError(f"the session server {fixture!r} was not launched: tests/conftest.py launches it at "
                         f"collection for the tests whose fixtures name it")
    deadline = time.monotonic() + timeout_s
    path = state / f"{fixture}.json"
    while time.monotonic() < deadline:
        if path.exists():
            record = json.loads(path.read_text())
            if "error" in record:
                raise AssetError(f"the session server {fixture!r} could not be launched: {record['error']}")
            if not running(record["pid"]):
                raise AssetError(f"the session server {fixture!r} exited: {log_tail(record)}")
            try:
                if httpx.get(record["url"] + record["ready_path"], timeout=2).status_code == 200:
                    return Running(record["url"], record["pid"], record["log"])
            except httpx.HTTPError:
                pass
        time.sleep(1)
    raise AssetError(f"the session server {fixture!r} did not answer within {timeout_s:.0f} s: "
                     f"{log_tail(json.loads(path.read_text())) if path.exists() else '(not launched yet)'}")


def stop_all() -> list[str]:
    """Stop every server the session launched (SIGTERM to its process group, SIGKILL after 20 s); the lines of
    those still running after that (none, unless a kill failed)."""
    join_launches()
    state = state_dir()
    left = []
    for path in sorted(state.glob("*.json")) if state is not None else []:
        record = json.loads(path.read_text())
        pid = record.get("pid")
        if pid is None:
            continue
        _stop_group(pid)
        if running(pid):
            left.append(f"pid {pid} session server {path.stem} at {record['url']}")
    if state is not None and not left:
        shutil.rmtree(state, ignore_errors=True)
    return left


def _stop_group(pgid: int) -> None:
    for sig, grace_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and _group_alive(pgid):
            time.sleep(0.2)
        if not _group_alive(pgid):
            return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return any(_pgid_of(p) == pgid and running(int(p)) for p in os.listdir("/proc") if p.isdigit())


def _pgid_of(pid: str) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])
    except (FileNotFoundError, IndexError, ValueError):
        return None
