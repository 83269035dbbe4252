"""Every `fray-ray` subcommand's --help names it as typed and describes each of its options."""

from __future__ import annotations

import argparse

import pytest

from fray_ray import cli


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(actions) == 1
    parsers = dict(actions[0].choices)
    parsers["start"] = cli.build_start_parser()  # main() hands `start` to its own parser
    return parsers


SUBCOMMANDS = sorted(_subcommands())


def _help_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        cli.main([*argv, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_the_overview_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help_of(capsys)
    assert text.startswith("usage: fray-ray ")
    for name in SUBCOMMANDS:
        assert name in text


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_each_subcommand_help_describes_all_its_options(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = _help_of(capsys, name)
    assert text.startswith(f"usage: fray-ray {name} "), text.splitlines()[0]
    parser = _subcommands()[name]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        label = action.option_strings[-1] if action.option_strings else (action.metavar or action.dest)
        assert action.help and action.help != argparse.SUPPRESS, f"fray-ray {name}: {label} has no help"
        assert label in text, f"fray-ray {name} --help does not list {label}"
        # its description follows on the option's own line or the next one
        invocation = parser._get_formatter()._format_action_invocation(action)
        lines = text[text.index("\n\n"):].splitlines()  # past the usage
        where = next(i for i, line in enumerate(lines) if line.strip().startswith(invocation))
        described = " ".join(lines[where:where + 2])
        assert action.help.split()[0] in described, f"fray-ray {name}: {label}'s help is not beside it"


def test_start_lists_block_and_temp_dir_as_options(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help_of(capsys, "start")
    options = text[text.index("options:"):]
    assert "--block" in options and "--temp-dir" in options and "--tpu" in options
    assert "python -m fray_ray.cluster" not in text


def test_run_takes_a_token_and_describes_its_script(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help_of(capsys, "run")
    assert "--token" in text
    assert "script " in text and "sys.argv[1:]" in text


def test_start_refuses_an_unknown_option_under_its_own_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["start", "--no-such-option"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "fray-ray start" in err and "--no-such-option" in err
