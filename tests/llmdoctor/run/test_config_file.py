"""Config file discovery and parsing: [tool.llmdoctor] / llmdoctor.toml, model dir before cwd, errors named."""
from __future__ import annotations

import pytest

from llmdoctor.run.config_file import ConfigFileError, load_settings


def test_no_config_gives_empty_settings(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')  # no [tool.llmdoctor]: not a config
    settings = load_settings(tmp_path, cwd=tmp_path)
    assert settings.select is None and settings.source is None and settings.thresholds == {}


def test_pyproject_table_is_read(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.llmdoctor]\nselect = ["VOC", "tokenizer"]\nignore = "GPU"\nfail_on = "warning"\nquick = true\n'
        '[tool.llmdoctor.thresholds.emb002]\nmax_norm_ratio = 8\n')
    s = load_settings(None, cwd=tmp_path)
    assert (s.select, s.ignore, s.fail_on, s.quick) == (["VOC", "tokenizer"], ["GPU"], "warning", True)
    assert s.thresholds == {"EMB002": {"max_norm_ratio": 8}}
    assert s.source == tmp_path / "pyproject.toml"


def test_search_order_model_dir_first_and_llmdoctor_toml_before_pyproject(tmp_path):
    model, cwd = tmp_path / "model", tmp_path / "cwd"
    model.mkdir(), cwd.mkdir()
    (cwd / "llmdoctor.toml").write_text('fail-on = "never"\n')
    assert load_settings(model, cwd=cwd).fail_on == "never"
    (model / "pyproject.toml").write_text('[tool.llmdoctor]\nfail-on = "warning"\n')
    assert load_settings(model, cwd=cwd).fail_on == "warning"
    (model / "llmdoctor.toml").write_text('fail-on = "error"\n')
    assert load_settings(model, cwd=cwd).source == model / "llmdoctor.toml"


@pytest.mark.parametrize("text, message", [
    ('selct = ["VOC"]\n', "unknown key 'selct'"),
    ('fail-on = "sometimes"\n', "fail-on must be one of"),
    ('select = [1, 2]\n', "select must be a list of strings"),
    ('quick = "yes"\n', "quick must be true or false"),
    ('thresholds = 3\n', "thresholds must be tables"),
    ('select = [\n', "invalid TOML"),
])
def test_bad_config_is_a_one_line_error_naming_the_file(tmp_path, text, message):
    (tmp_path / "llmdoctor.toml").write_text(text)
    with pytest.raises(ConfigFileError, match=message) as info:
        load_settings(tmp_path, cwd=tmp_path)
    assert str(tmp_path / "llmdoctor.toml") in str(info.value) and "\n" not in str(info.value)
