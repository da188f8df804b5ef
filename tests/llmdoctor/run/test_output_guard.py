"""No writer writes into the model directory: `check -o`, `baseline -o`, `triage -o`, `fix -o` and the probes'
`-o` refuse a target inside the model, equal to it, or reached through a symlink into it: exit 2, one line on
stderr, no traceback, the model directory untouched and nothing written anywhere."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmdoctor.cli import cli
from llmdoctor.run.output_guard import InsideModelError, is_inside, refuse_inside_model

# each writer with the arguments that come before its output path
WRITERS = {
    "check": lambda m: ["check", str(m), "--select", "files", "-o"],
    "baseline": lambda m: ["baseline", str(m), "--device", "cpu", "--quick", "-o"],
    "triage": lambda m: ["triage", str(m), "--device", "cpu", "--no-checks", "-o"],
    "fix": lambda m: ["fix", str(m), "--vocab", "-o"],
    "probe-kv": lambda m: ["probe", "kv", "--with-model", str(m), "--requests", "5", "-o"],
    "probe-bandwidth": lambda m: ["probe", "bandwidth", "--model", str(m), "--device", "cpu", "-o"],
}
# where the output goes, relative to a scratch dir holding model/ and links into it
TARGETS = {
    "file_inside": "model/out.json",
    "nested_new_dir": "model/sub/deeper/out.json",
    "equal": "model",
    "equal_with_slash": "model/.",
    "dotdot_back_in": "elsewhere/../model/out.json",
    "through_dir_link": "link_to_model/out.json",
    "dir_link_itself": "link_to_model",
    "file_link_into_model": "link_to_config",
}


@pytest.fixture
def layout(tmp_path, factory_model_dir) -> Path:
    """tmp/model (a copy of a tiny factory model), tmp/link_to_model -> model,
    tmp/link_to_config -> model/config.json."""
    model = Path(shutil.copytree(factory_model_dir("llama"), tmp_path / "model"))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link_to_model").symlink_to(model, target_is_directory=True)
    (tmp_path / "link_to_config").symlink_to(model / "config.json")
    return tmp_path


def scratch_listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if "model" not in p.relative_to(root).parts[:1])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("writer", WRITERS)
def test_writer_refuses_a_target_in_the_model_dir(writer, target, layout, dir_snapshot):
    model = layout / "model"
    before, around = dir_snapshot(model), scratch_listing(layout)
    done = CliRunner().invoke(cli, WRITERS[writer](model) + [str(layout / TARGETS[target])])
    assert done.exit_code == 2, done.output
    assert not isinstance(done.exception, Exception) or isinstance(done.exception, SystemExit), done.exception
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmdoctor: error: "), done.stderr
    assert "inside" in lines[0] and "Traceback" not in done.output
    assert done.stdout == ""
    assert dir_snapshot(model) == before
    assert scratch_listing(layout) == around  # nothing written beside the model either (no temp files, no bundle)


def test_model_reached_through_a_link_is_guarded_too(layout, dir_snapshot):
    """The model given as a symlink and the output given by its real path: still the same directory."""
    before = dir_snapshot(layout / "model")
    done = CliRunner().invoke(cli, ["check", str(layout / "link_to_model"), "--select", "files",
                                    "-o", str(layout / "model" / "report.json")])
    assert done.exit_code == 2 and len(done.stderr.splitlines()) == 1, done.output
    assert dir_snapshot(layout / "model") == before


def test_a_sibling_with_the_same_prefix_is_not_inside(layout, dir_snapshot):
    """model-report.json next to model/ shares the name prefix, not the directory: it is written."""
    out = layout / "model-report.json"
    before = dir_snapshot(layout / "model")
    done = CliRunner().invoke(cli, ["check", str(layout / "model"), "--select", "files", "--format", "json",
                                    "-o", str(out)])
    assert done.exit_code in (0, 1), done.output
    assert out.read_text().lstrip().startswith("{")
    assert dir_snapshot(layout / "model") == before


def test_a_directory_elsewhere_is_a_one_line_error(layout):
    """-o naming an existing directory outside the model: one line (not click's usage block), nothing written."""
    target = layout / "elsewhere"
    for args in (WRITERS["check"], WRITERS["baseline"]):
        done = CliRunner().invoke(cli, args(layout / "model") + [str(target)])
        assert done.exit_code == 2 and len(done.stderr.splitlines()) == 1, done.output
        assert "directory" in done.stderr
        assert list(target.iterdir()) == [] and not (layout / "elsewhere.tmp").exists()


def test_a_triage_bundle_on_a_file_is_a_one_line_error(layout):
    target = layout / "elsewhere" / "a_file"
    target.write_text("x")
    done = CliRunner().invoke(cli, WRITERS["triage"](layout / "model") + [str(target)])
    assert done.exit_code == 2 and done.stderr.splitlines() == [
        f"llmdoctor: error: {target}: cannot create the bundle directory: File exists"], done.output
    assert target.read_text() == "x"


def test_is_inside():
    assert is_inside("/a/b", "/a/b") and is_inside("/a/b/c/d", "/a/b") and is_inside("/a/b/../b/x", "/a/b")
    assert not is_inside("/a/bc", "/a/b") and not is_inside("/a", "/a/b") and not is_inside("/x/b", "/a/b")


def test_refuse_inside_model_without_output_or_model_is_a_no_op(tmp_path):
    refuse_inside_model(None, tmp_path)
    refuse_inside_model(tmp_path / "x", None)
    with pytest.raises(InsideModelError, match="refusing to write the thing inside the model directory"):
        refuse_inside_model(tmp_path / "x", tmp_path, "thing")


def test_installed_script_refuses_with_one_line(layout, dir_snapshot):
    """The console script as a real process: exit 2, exactly one stderr line, empty stdout."""
    script = shutil.which("llmdoctor")
    assert script, "the llmdoctor console script is not installed: run `pip install -e .`"
    model = layout / "model"
    before = dir_snapshot(model)
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    done = subprocess.run([script, "check", str(model), "-o", str(layout / "link_to_model" / "report.html"),
                           "--format", "html"], capture_output=True, text=True, timeout=120, cwd=layout, env=env)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"llmdoctor: error: {layout / 'link_to_model' / 'report.html'}: refusing to write the report inside the "
        f"model directory {model} (llmdoctor never writes into a model)"]
    assert dir_snapshot(model) == before
