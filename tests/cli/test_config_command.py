"""``attnkit config list`` and ``attnkit config show NAME``."""

from __future__ import annotations

from attnkit import recipes
from attnkit.cli.main import main


def test_list_names_every_recipe_with_its_first_line(capsys):
    assert main(["config", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == recipes.names()
    vit = next(line for line in lines if line.startswith("vit_digits "))
    assert "A small Vision Transformer on scikit-learn's 8x8 digits" in vit


def test_show_prints_the_recipe_as_shipped(capsys):
    assert main(["config", "show", "sst2_minilm"]) == 0
    assert capsys.readouterr().out == (recipes.RECIPES / "sst2_minilm.yaml").read_text()


def test_mistakes_are_one_line(capsys):
    assert main(["config", "show", "sst2_minlm"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "attnkit config: error: config show: no packaged recipe 'sst2_minlm'; "
        "did you mean 'sst2_minilm'? (attnkit config list)\n"
    )
    assert main(["config", "show"]) == 2
    assert "name a recipe" in capsys.readouterr().err
    assert main(["config", "list", "x"]) == 2
    assert "takes no NAME" in capsys.readouterr().err
