"""Command lines in Kafka's tool syntax, with Onceflow's older short forms as aliases.

Each command's parser is written in the syntax of the Kafka tool that does the same job
(kafka-topics.sh's `--create --topic T`, the console consumer's `--property print.key=true`),
so its help leads with that. The older forms (`topics create T`, a positional topic) are
rewritten into it before argparse sees them, so both parse to the same request. The same
walk over the arguments catches what argparse would answer with a usage screen: a Kafka
option Onceflow does not support names itself as such, and a misspelled option or command
gets the closest match, each on one line.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from onceflow.cli.common import UsageError
from onceflow.cli.kafka_flags import KAFKA_TOOLS, TOOL_COMMANDS, UNSUPPORTED

__all__ = ["OnceflowParser", "OneLineError", "translate"]

TOPIC_ACTIONS = ("create", "list", "describe", "alter", "delete")
_NUMBER = re.compile(r"-\d+(\.\d+)?$")
_AMBIGUOUS = object()


class OneLineError(Exception):
    """A mistake answered with one line saying what to type instead (exit 2)."""


class OnceflowParser(argparse.ArgumentParser):
    """The top-level parser rewrites aliases before parsing and lets the chosen command
    settle its arguments after (`normalize`), so every caller of `parse_args` gets the
    same request from either form."""

    translate_aliases = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        if not self.translate_aliases:
            return super().parse_known_args(args, namespace)
        argv = sys.argv[1:] if args is None else list(args)
        try:
            argv = translate(argv, _commands(self))
        except OneLineError as exc:
            self.exit(2, f"{self.prog}: error: {exc}\n")
        parsed, extras = super().parse_known_args(argv, namespace)
        normalize: Callable[[Any], None] | None = getattr(parsed, "normalize", None)
        if normalize is not None:
            try:
                normalize(parsed)
            except UsageError as exc:  # one line: what to type instead
                self.exit(2, f"{parsed.command_parser.prog}: error: {exc}\n")
        return parsed, extras


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _is_option(token: str) -> bool:
    return token.startswith("-") and token != "-" and not _NUMBER.match(token)


def _closest(word: str, candidates: Sequence[str]) -> str | None:
    """The candidate closest to a misspelled word, compared without leading dashes."""
    bare = {candidate.lstrip("-"): candidate for candidate in candidates}
    found = difflib.get_close_matches(word.lstrip("-"), list(bare), n=1, cutoff=0.7)
    return bare[found[0]] if found else None


def _unknown_option(name: str, options: Sequence[str], command: str) -> OneLineError:
    unsupported = UNSUPPORTED.get(command, {})
    if name in unsupported:
        hint = unsupported[name]
        script = KAFKA_TOOLS[command]
        return OneLineError(
            f"{name} is a {script} option Onceflow does not support" + (f"; {hint}" if hint else "")
        )
    close = _closest(name, [option for option in options if option.startswith("--")])
    if close is not None:
        return OneLineError(f"unknown option {name}; did you mean {close}?")
    return OneLineError(f"unknown option {name}; see onceflow {command} --help")


def _unknown_word(word: str, choices: Sequence[str], what: str, command: str) -> OneLineError:
    hint = UNSUPPORTED.get(command, {}).get(word)
    if hint is not None:
        script = KAFKA_TOOLS[command]
        return OneLineError(f"{word} is a {script} command Onceflow does not support; {hint}")
    close = _closest(word, choices)
    if close is not None:
        return OneLineError(f"unknown {what} {word!r}; did you mean {close!r}?")
    return OneLineError(f"unknown {what} {word!r}; choose from {', '.join(choices)}")


def _resolve(token: str, options: dict[str, argparse.Action]) -> argparse.Action | object:
    """The action an option token names: exact, or a unique prefix as argparse allows."""
    name = token.split("=", 1)[0] if token.startswith("--") else token
    if name in options:
        return options[name]
    found = {id(a): a for o, a in options.items() if o.startswith("--") and o.startswith(name)}
    if len(found) == 1:
        return next(iter(found.values()))
    return _AMBIGUOUS if found else None


def _value_count(action: argparse.Action, token: str, rest: Sequence[str]) -> int:
    """How many of the tokens after an option are its values."""
    if token.startswith("--") and "=" in token:
        return 0
    nargs = action.nargs
    if nargs is None:
        return 1
    if isinstance(nargs, int):
        return nargs
    if nargs == "?":
        return 1 if rest and not _is_option(rest[0]) else 0
    count = 0
    while count < len(rest) and not _is_option(rest[count]):
        count += 1
    return count


def _options(*parsers: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {o: a for parser in parsers for a in parser._actions for o in a.option_strings}


def positionals(parser: argparse.ArgumentParser, tokens: Sequence[str], command: str) -> list[int]:
    """Indices of the positional tokens; an unknown option raises its one-line error."""
    return _positionals(_options(parser), tokens, command)


def _positionals(
    options: dict[str, argparse.Action], tokens: Sequence[str], command: str
) -> list[int]:
    found: list[int] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token == "--":
            found.extend(range(index + 1, len(tokens)))
            break
        if not _is_option(token):
            found.append(index)
            index += 1
            continue
        action = _resolve(token, options)
        if action is None:
            raise _unknown_option(token.split("=", 1)[0], list(options), command)
        index += 1
        if isinstance(action, argparse.Action):
            index += _value_count(action, token, tokens[index:])
    return found


def _rewrite(tokens: list[str], places: list[int], action: int | None) -> list[str]:
    """Positional topics become `--topic T`; the one at `action`, if any, `--ACTION`."""
    rewritten: list[str] = []
    for index, token in enumerate(tokens):
        if index == action:
            rewritten.append(f"--{token}")
        elif index in places:
            rewritten += ["--topic", token]
        elif token != "--":
            rewritten.append(token)
    return rewritten


def _topics(tokens: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """`topics create T ...` -> `topics --create --topic T ...`."""
    places = positionals(parser, tokens, "topics")
    if not places:
        return tokens
    action = tokens[places[0]]
    if action not in TOPIC_ACTIONS:
        raise _unknown_word(action, [f"--{a}" for a in TOPIC_ACTIONS], "topics action", "topics")
    return _rewrite(tokens, places, places[0])


def _one_topic(command: str) -> Callable[[list[str], argparse.ArgumentParser], list[str]]:
    """`produce T ...` -> `produce --topic T ...` (a second positional is left to argparse)."""

    def rewrite(tokens: list[str], parser: argparse.ArgumentParser) -> list[str]:
        places = positionals(parser, tokens, command)
        return _rewrite(tokens, places[:1], None) if places else tokens

    return rewrite


def _subcommand(command: str) -> Callable[[list[str], argparse.ArgumentParser], list[str]]:
    """`transactions --bootstrap-server B list` (Kafka's order) -> `transactions list ...`:
    the options before the subcommand belong to it, where argparse looks for them."""

    def rewrite(tokens: list[str], parser: argparse.ArgumentParser) -> list[str]:
        actions = _commands(parser)
        words = _positionals(_options(parser, *actions.values()), tokens, command)
        chosen = next((i for i in words if tokens[i] in actions), None)
        if chosen is None:
            if words:
                raise _unknown_word(tokens[words[0]], list(actions), f"{command} action", command)
            return tokens
        moved = [tokens[chosen], *tokens[:chosen], *tokens[chosen + 1 :]]
        positionals(actions[tokens[chosen]], moved[1:], command)
        return moved

    return rewrite


def _check_only(command: str) -> Callable[[list[str], argparse.ArgumentParser], list[str]]:
    def rewrite(tokens: list[str], parser: argparse.ArgumentParser) -> list[str]:
        positionals(parser, tokens, command)
        return tokens

    return rewrite


_REWRITES: dict[str, Callable[[list[str], argparse.ArgumentParser], list[str]]] = {
    "topics": _topics,
    "produce": _one_topic("produce"),
    "consume": _one_topic("consume"),
    "transactions": _subcommand("transactions"),
}


_QUOTA_KEYS = (
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
    "controller_mutation_rate",
)
_QUOTA_OPTIONS = ("--client", "--client-defaults", "--user-defaults", "--entity-default")


def _users_entity(tokens: Sequence[str]) -> bool:
    """A kafka-configs.sh line about users' SCRAM credentials (the `users` command), not
    about client quotas (which `configs` serves): no quota key, no client, no default."""
    pairs = list(zip(tokens, [*tokens[1:], ""], strict=True))
    users = (
        "--user" in tokens or "--entity-type=users" in tokens or ("--entity-type", "users") in pairs
    )
    quotas = (
        any(key in token for token in tokens for key in _QUOTA_KEYS)
        or any(option in tokens for option in _QUOTA_OPTIONS)
        or "--entity-type=clients" in tokens
        or ("--entity-type", "clients") in pairs
    )
    return users and not quotas


def translate(argv: Sequence[str], commands: dict[str, argparse.ArgumentParser]) -> list[str]:
    """argv with the aliases rewritten into the Kafka form; raises `OneLineError`."""
    tokens = list(argv)
    where = next((i for i, token in enumerate(tokens) if not _is_option(token)), None)
    if where is None:
        return tokens
    command = tokens[where]
    if command not in commands:
        if command in TOOL_COMMANDS:
            raise OneLineError(f"{command} is `onceflow {TOOL_COMMANDS[command]}` here")
        close = _closest(command, list(commands))
        if close is not None:
            raise OneLineError(f"unknown command {command!r}; did you mean {close!r}?")
        return tokens  # argparse lists the choices
    if command == "configs" and _users_entity(tokens[where + 1 :]):
        command = tokens[where] = "users"  # kafka-configs.sh's users: the users command
    rewrite = _REWRITES.get(command, _check_only(command))
    return [*tokens[: where + 1], *rewrite(tokens[where + 1 :], commands[command])]
