"""``offsetstore completion bash``: a bash completion script written from the command's own argparse tree."""

from __future__ import annotations

import argparse
import shlex

from offsetstore.cli._values import STATUS_NAMES, parse_statuses

# Kept apart from the options: the script completes their values, not the options themselves.
_VALUE_WORD = "__value__"

#: The words an option's value completes to where its parser (argparse's ``type``) knows them
#: but argparse's ``choices`` cannot say them (``--state LAGGING,STOPPED`` takes a list).
_VALUE_WORDS = {parse_statuses: STATUS_NAMES}


def bash_script(parser: argparse.ArgumentParser, program: str = "offsetstore") -> str:
    """The script, for ``source <(offsetstore completion bash)`` or a file in bash-completion's directory.

    Generated from the parser, so a new command or option completes without anyone editing a
    script. Zsh runs it after ``autoload -U bashcompinit && bashcompinit``.
    """
    levels: dict[str, argparse.ArgumentParser] = {}
    _walk(parser, "", levels)
    steps, words, values = [], [], []
    for path, level in levels.items():
        subcommands = _subcommands(level)
        for name in subcommands:
            steps.append(f"        {shlex.quote(path + ' ' + name)}) path={shlex.quote(path + '/' + name)} ;;")
        offered = [*subcommands, *_options(level)]
        words.append(f"        {shlex.quote(path)}) words={shlex.quote(' '.join(offered))} ;;")
        for action in level._actions:
            if not action.option_strings or action.nargs == 0:
                continue
            known = action.choices or _VALUE_WORDS.get(action.type)  # type: ignore[call-overload]
            choices = " ".join(str(c) for c in known) if known else _VALUE_WORD
            for option in action.option_strings:
                values.append(f"        {shlex.quote(path + ' ' + option)}) words={shlex.quote(choices)} ;;")
    function = f"_{program.replace('-', '_')}_complete"
    return "\n".join(
        [
            f"# bash completion for {program}: source <({program} completion bash)",
            f"{function}() {{",
            '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="" path="" words="" i',
            '    (( COMP_CWORD > 1 )) && prev="${COMP_WORDS[COMP_CWORD-1]}"',
            "    for (( i = 1; i < COMP_CWORD; i++ )); do",
            '        case "$path ${COMP_WORDS[i]}" in',
            *steps,
            "        esac",
            "    done",
            '    case "$path $prev" in',
            *values,
            "    esac",
            f'    if [[ "$words" == {_VALUE_WORD} ]]; then',
            "        COMPREPLY=()  # a value of the user's own: bash's default (file names) takes over",
            "        return",
            "    fi",
            '    if [[ -z "$words" ]]; then',
            '        case "$path" in',
            *words,
            "        esac",
            "    fi",
            '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
            "}",
            f"complete -o default -F {function} {program}",
            "",
        ]
    )


def _walk(parser: argparse.ArgumentParser, path: str, levels: dict[str, argparse.ArgumentParser]) -> None:
    levels[path] = parser
    for name, child in _subparsers(parser).items():
        _walk(child, f"{path}/{name}", levels)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _subcommands(parser: argparse.ArgumentParser) -> list[str]:
    return list(_subparsers(parser))


def _options(parser: argparse.ArgumentParser) -> list[str]:
    """The long options, and the choices of a positional that has them (``completion bash``)."""
    shown = [
        a for a in parser._actions if a.help != argparse.SUPPRESS and not isinstance(a, argparse._SubParsersAction)
    ]
    choices = [str(c) for a in shown if not a.option_strings and a.choices for c in a.choices]
    return choices + [option for a in shown for option in a.option_strings if option.startswith("--")]
