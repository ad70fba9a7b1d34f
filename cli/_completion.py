"""``offsetstore completion bash``: a bash completion script written from the command's own argparse tree."""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Sequence

from offsetstore.cli._connect import DEFAULT_SERVER, SERVER_ENV, security_options, with_default_port
from offsetstore.cli._parser import connection_parser
from offsetstore.cli._profile import apply_profile
from offsetstore.cli._values import STATUS_NAMES, parse_statuses
from offsetstore.client import OffsetStoreClient
from offsetstore.core.errors import OffsetStoreError

# Kept apart from the options: the script completes their values, not the options themselves.
_VALUE_WORD = "__value__"
# A value that is a group's name: the script asks `completion --groups PREFIX bash -- WORDS...`.
_GROUP_WORD = "__group__"
_GROUP_METAVAR = "GROUP"
_NEVER = "'\\0'"  # a case pattern no path matches, where a list is empty

#: How long a completion waits for the server: a TAB must not hang on a server that is down.
GROUPS_TIMEOUT_SECONDS = 2.0
#: At most this many names: a screenful, and one page of ListGroups.
GROUPS_LIMIT = 200

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
    steps, words, values, valued, grouped = [], [], [], [], []
    for path, level in levels.items():
        subcommands = _subcommands(level)
        for name in subcommands:
            steps.append(
                f"            {shlex.quote(path + ' ' + name)}) path={shlex.quote(path + '/' + name)}; npos=0; continue ;;"
            )
        offered = [*subcommands, *_options(level)]
        words.append(f"        {shlex.quote(path)}) words={shlex.quote(' '.join(offered))} ;;")
        positionals = [
            a for a in level._actions if not a.option_strings and not isinstance(a, argparse._SubParsersAction)
        ]
        if positionals and positionals[0].metavar == _GROUP_METAVAR:
            grouped.append(shlex.quote(path))
        for action in level._actions:
            if not action.option_strings or action.nargs == 0:
                continue
            known = action.choices or _VALUE_WORDS.get(action.type)  # type: ignore[call-overload]
            choices = " ".join(str(c) for c in known) if known else _VALUE_WORD
            if action.metavar == _GROUP_METAVAR:
                choices = _GROUP_WORD
            for option in action.option_strings:
                values.append(f"        {shlex.quote(path + ' ' + option)}) words={shlex.quote(choices)} ;;")
                valued.append(shlex.quote(path + " " + option))
    function = f"_{program.replace('-', '_')}_complete"
    return "\n".join(
        [
            f"# bash completion for {program}: source <({program} completion bash)",
            f"{function}() {{",
            '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="" path="" words="" i npos=0',
            '    (( COMP_CWORD > 1 )) && prev="${COMP_WORDS[COMP_CWORD-1]}"',
            "    # The command's path, and how many operands (not options, not an option's value) follow it.",
            "    for (( i = 1; i < COMP_CWORD; i++ )); do",
            '        case "$path ${COMP_WORDS[i]}" in',
            *steps,
            "        esac",
            '        case "$path ${COMP_WORDS[i-1]}" in',
            f"            {'|'.join(valued) or _NEVER}) ;;",
            '            *) [[ "${COMP_WORDS[i]}" == -* ]] || npos=$((npos + 1)) ;;',
            "        esac",
            "    done",
            '    case "$path $prev" in',
            *values,
            "    esac",
            '    if [[ -z "$words" && $npos == 0 && "$cur" != -* ]]; then',
            '        case "$path" in',
            f"            {'|'.join(grouped) or _NEVER}) words={_GROUP_WORD} ;;",
            "        esac",
            "    fi",
            f'    if [[ "$words" == {_VALUE_WORD} ]]; then',
            "        COMPREPLY=()  # a value of the user's own: bash's default (file names) takes over",
            "        return",
            "    fi",
            f'    if [[ "$words" == {_GROUP_WORD} ]]; then',
            "        # The groups of the server this very line names (its --server, TLS, token, profile). The",
            "        # words go on stdin, NUL-separated by the printf builtin: a --token typed on the line",
            "        # must never be in a process's argv (ps shows it to every user of the machine).",
            "        mapfile -t COMPREPLY < <(printf '%s\\0' \"${COMP_WORDS[@]:1:COMP_CWORD-1}\" | "
            f'command {program} completion --groups "$cur" --line-on-stdin bash 2>/dev/null)',
            "        (( ${#COMPREPLY[@]} )) && return",
            '        words=""  # none to offer (no server reached): the options, as before',
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


def group_names(words: Sequence[str], prefix: str) -> list[str]:
    """The names of the groups starting with `prefix` on the server the command line `words` names.

    Names that are not printable (a newline, an escape) are left out.

    The command's own connection options decide (``--server``, TLS, the token, ``--command-config``
    and the environment), wherever they stand on the line. Nothing at all when the server cannot
    be reached or refuses: a completion has nowhere to say why, and must not hang a TAB.
    """
    args, _ = connection_parser().parse_known_args(list(words))
    try:
        apply_profile(args)
        options = security_options(args)
        server = with_default_port(args.server or os.environ.get(SERVER_ENV) or DEFAULT_SERVER)
        with OffsetStoreClient(server, timeout=GROUPS_TIMEOUT_SECONDS, **options) as client:
            page = client.list_groups(prefix, page_size=GROUPS_LIMIT)
    except (OffsetStoreError, ValueError, OSError):
        return []
    # One name a line: a name with a newline would be two candidates (one made up), and a
    # control character would reach the terminal. Such a group is left for the user to type.
    return [group.group_id for group in page.items if group.group_id.isprintable()]
