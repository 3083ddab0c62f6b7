"""The packaged run configs: every one found by name, valid, and a path still wins."""

from __future__ import annotations

import pytest

from attnkit import recipes
from attnkit.errors import ConfigError
from attnkit.training.runconfig import config_path, load_run_config


def test_every_yaml_in_the_folder_is_a_recipe_that_loads():
    names = recipes.names()
    assert names == sorted(p.stem for p in recipes.RECIPES.glob("*.yaml"))
    assert {"multi30k_de_en_cpu", "sst2_minilm", "vit_digits"} <= set(names)
    for name in names:
        assert (
            recipes.find(name) == recipes.find(f"{name}.yaml") == recipes.RECIPES / f"{name}.yaml"
        )
        load_run_config(name)  # valid as shipped (data.dir is not read here)


def test_a_name_finds_the_recipe_and_a_path_wins(tmp_path, monkeypatch):
    assert config_path("vit_digits") == recipes.RECIPES / "vit_digits.yaml"
    assert load_run_config("vit_digits", ["train.max_steps=3"]).train.max_steps == 3
    monkeypatch.chdir(tmp_path)
    (tmp_path / "vit_digits").write_text("task: lm\n", encoding="utf-8")
    assert config_path("vit_digits").resolve() == tmp_path / "vit_digits"  # a file wins
    assert load_run_config("vit_digits").task == "lm"


@pytest.mark.parametrize("given", ["vit_digit", "configs/none.yaml", "../vit_digits", ".hidden"])
def test_neither_a_file_nor_a_recipe_is_one_line(given, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="config file not found, and no packaged recipe") as e:
        load_run_config(given)
    assert "\n" not in str(e.value)
    if given == "vit_digit":
        assert "did you mean 'vit_digits'?" in str(e.value)


def test_a_directory_is_not_a_config(tmp_path):
    with pytest.raises(ConfigError, match="is not a regular file"):
        load_run_config(tmp_path)


def test_the_clone_keeps_configs_as_a_link_to_the_recipes():
    # scripts, records and users of a clone say configs/NAME.yaml: the same files
    clone = recipes.RECIPES.parents[1] / "configs"
    if not clone.exists():
        pytest.skip("not a clone (an installed attnkit)")
    assert clone.is_symlink() and clone.resolve() == recipes.RECIPES
