"""``echo2 train --help-config``: the keys users set, each with its default and its docstring's
first sentence, on one screen; ``=all`` lists every key of the config."""


from echo2.cli import main
from echo2.config.keys import USER_KEYS, config_keys, first_sentence


def test_the_keys_users_set_fit_one_screen_and_every_one_is_a_key_of_the_config(capsys):
    every = {key.name for key in config_keys()}
    assert set(USER_KEYS) <= every and len(USER_KEYS) <= 25 < len(every)
    assert main(["train", "--help-config"]) == 0
    listed = [line.split(" = ")[0] for line in capsys.readouterr().out.splitlines() if " = " in line]
    assert listed == list(USER_KEYS)
    assert main(["train", "--help-config=all"]) == 0
    out = capsys.readouterr().out
    assert "coordinator.window_share = 0.5" in out and len(out.splitlines()) == len(every)


def test_a_docstrings_first_sentence_reads_as_plain_text():
    assert first_sentence("Keyword arguments (e.g. ``n``, :mod:`echo2.tasks`). More here.") == \
        "Keyword arguments (e.g. `n`, echo2.tasks)"
