"""Help for every command; one-line errors and exit codes for bad arguments and an
unreachable broker (as a separate process, so nothing is hidden by pytest)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import pytest

from odradek.testing import free_port

pytestmark = pytest.mark.timeout(60)

COMMANDS = [
    ["topics", "create"],
    ["topics", "list"],
    ["topics", "describe"],
    ["topics", "delete"],
    ["topics", "alter"],
    ["topics", "delete-records"],
    ["produce"],
    ["consume"],
    ["groups", "list"],
    ["groups", "describe"],
    ["groups", "delete"],
    ["groups", "reset-offsets"],
    ["groups", "delete-offsets"],
    ["groups", "history"],
    ["acls", "list"],
    ["acls", "add"],
    ["acls", "remove"],
    ["users", "list"],
    ["users", "add"],
    ["users", "remove"],
    ["transactions", "list"],
    ["transactions", "describe"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_explains_itself(cli, command: list[str]) -> None:
    result = cli(*command, "--help", connect=False)
    assert result.code == 0
    assert "--bootstrap" in result.out
    assert "usage: odradek " + " ".join(command) in result.out
    assert len(result.out.splitlines()) > 8  # a description, not just the usage line


def test_describe_help_says_where_the_generation_comes_from(cli) -> None:
    result = cli("groups", "describe", "--help", connect=False)
    assert "__consumer_offsets" in result.out and "unknown" in result.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["topics"], "required: ACTION"),
        (["topics", "create"], "required: TOPIC"),
        (["topics", "create", "t", "--partitions", "zero"], "expected a whole number"),
        (["topics", "create", "t", "--partitions", "0"], "expected a positive whole number"),
        (["topics", "create", "t", "--config", "novalue"], "expected KEY=VALUE"),
        (["topics", "list", "--bootstrap", "nowhere"], "--bootstrap expects HOST:PORT"),
        (["topics", "list", "--bootstrap", "host:99999"], "--bootstrap expects HOST:PORT"),
        (["topics", "alter", "t"], "nothing to change"),
        (["produce", "t", "--acks", "2"], "invalid choice: '2'"),
        (["produce", "t", "--key-separator", ""], "--key-separator must not be empty"),
        (["consume", "t", "--group", "g", "--partition", "0"], "not allowed with argument"),
        (["consume", "t", "-p", "0"], "-p is the partition count ('topics create -p 6'); to pi"),
        (["produce", "t", "-p", "1"], "to pick one partition give --partition N"),
        (["produce", "t", "-p"], "to pick one partition give --partition N"),
        (["consume", "t", "--format", "xml"], "invalid choice: 'xml'"),
        (["consume", "t", "--timeout", "-1"], "expected a positive number"),
        (["groups", "reset-offsets", "g"], "one of the arguments --to-earliest"),
        (["groups", "reset-offsets", "g", "--to-latest", "--to-offset", "1"], "not allowed"),
        (["groups", "reset-offsets", "g", "--to-datetime", "yesterday"], "ISO 8601"),
        (["groups", "reset-offsets", "g", "--to-earliest", "--topic", ":1"], "--topic expects"),
        (["groups", "reset-offsets", "g", "--to-earliest", "--topic", "t:x"], "--topic expects"),
        (["groups", "list", "--state", "Sleeping"], "invalid choice"),
        (["groups", "describe", "g", "--format", "yaml"], "invalid choice"),
        (["nonsense"], "invalid choice"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(run_process, args: list[str], message: str) -> None:
    port = free_port()  # nothing listens: bad arguments must fail before connecting
    if "--bootstrap" not in args:
        args = [*args, "--bootstrap", f"127.0.0.1:{port}"] if len(args) > 1 else args
    result = run_process(*args)
    assert result.code == 2, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert message in lines[0]
    assert "Traceback" not in result.err
    assert lines[0].startswith("odradek")


@pytest.mark.parametrize(
    "args",
    [
        ["topics", "list"],
        ["topics", "create", "t"],
        ["produce", "t"],
        ["consume", "t"],
        ["groups", "list"],
        ["groups", "describe", "g"],
        ["groups", "history", "g"],
    ],
    ids=" ".join,
)
def test_unreachable_broker_is_one_line_exit_1_within_seconds(run_process, args) -> None:
    port = free_port()
    started = time.monotonic()
    result = run_process(*args, "--bootstrap", f"127.0.0.1:{port}", "--connect-timeout", "2")
    # no hang: the 2 s connect timeout plus Python's start, with room for a loaded machine
    # (16 s was seen at load average 20)
    assert time.monotonic() - started < 40
    assert result.code == 1, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert f"cannot reach a broker at 127.0.0.1:{port}" in lines[0]
    assert "connection refused" in lines[0]


@pytest.fixture
def silent_broker():
    """A listening socket that never accepts: a connect succeeds (the kernel queues it)
    and no request is ever answered, like a hung broker."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


@pytest.mark.parametrize(
    "args",
    [
        ["topics", "list"],
        ["groups", "describe", "g"],
        ["groups", "history", "g"],
        ["groups", "list"],
        ["transactions", "list"],
    ],
    ids=" ".join,
)
@pytest.mark.timeout(120)
def test_timeout_bounds_a_command_whatever_the_connect_timeout(
    run_process, silent_broker, args
) -> None:
    started = time.monotonic()
    result = run_process(
        *args, "--bootstrap", silent_broker, "--connect-timeout", "600", "--timeout", "2",
        timeout=90,
    )  # fmt: skip
    took = time.monotonic() - started
    # 2 s and the interpreter's start, which takes many seconds on loaded shared cores;
    # the bound only has to tell that from the 600 s connect timeout --timeout cuts short
    assert took < 60, took
    assert result.code == 1, result
    [line] = result.err.strip().splitlines()
    assert line == (
        f"odradek: cannot reach a broker at {silent_broker} within 2s (--timeout): no answer"
    )


def test_every_broker_command_has_a_timeout(cli) -> None:
    for command in COMMANDS:
        help_text = cli(*command, "--help", connect=False).out
        assert "--timeout SECONDS" in help_text, command


def test_unknown_host_is_one_line(run_process) -> None:
    result = run_process(
        "topics", "list", "--bootstrap", "no-such-host.invalid:9092", "--connect-timeout", "2"
    )
    assert result.code == 1
    assert len(result.err.strip().splitlines()) == 1
    assert "cannot reach a broker" in result.err


def test_bootstrap_from_the_environment(cli, monkeypatch, bootstrap) -> None:
    from odradek.cli.common import BOOTSTRAP_ENV

    monkeypatch.setenv(BOOTSTRAP_ENV, bootstrap)
    result = cli("topics", "list", "--internal", connect=False)
    assert result.code == 0, result.err
    assert "__consumer_offsets" in result.out


def every_parser() -> list[argparse.ArgumentParser]:
    from odradek.cli.main import build_parser

    found, todo = [], [build_parser()]
    while todo:
        parser = todo.pop()
        found.append(parser)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += action.choices.values()
    return found


def test_each_short_option_means_one_thing_everywhere() -> None:
    """-p is a partition count wherever it is given (kafka-topics' --partitions), -o the
    output format, and so on: a short option never stands for two different options."""
    meanings: dict[str, set[str]] = {}
    for parser in every_parser():
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:
                continue  # a short option refused with a message (produce -p)
            shorts = [o for o in action.option_strings if not o.startswith("--")]
            longs = [o for o in action.option_strings if o.startswith("--")]
            for short in shorts:
                meanings.setdefault(short, set()).update(longs)
    assert {short: longs for short, longs in meanings.items() if len(longs) != 1} == {}
    assert meanings["-p"] == {"--partitions"} and meanings["-o"] == {"--format"}


def test_options_with_a_fixed_set_of_values_list_them() -> None:
    from odradek.cli.main import build_parser

    parser = build_parser()
    assert parser.parse_args(["serve", "--log-level", "debug"]).log_level == "DEBUG"
    assert "--log-level {DEBUG,INFO,WARNING,ERROR}" in " ".join(
        p.format_help() for p in every_parser() if p.prog == "odradek serve"
    ).replace("\n", " ")
    up = parser.parse_args(["cluster", "up", "--data-dir", "d"])
    assert up.format == "table"  # as every other command's --format


def test_docs_list_every_command() -> None:
    import argparse
    from pathlib import Path

    from odradek.cli.main import build_parser

    doc = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()

    def commands(parser: argparse.ArgumentParser, prefix: str) -> list[str]:
        found = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for word, sub in action.choices.items():
                    found += commands(sub, f"{prefix} {word}") or [f"{prefix} {word}"]
        return found

    every = commands(build_parser(), "odradek")
    # serve and cluster run brokers and read etcd: no --bootstrap, not in COMMANDS; console
    # is a server that runs until stopped (its own tests are in tests/console)
    servers = ("odradek serve", "odradek console")
    clients = [c for c in every if c not in servers and not c.startswith("odradek cluster ")]
    assert len(clients) == len(COMMANDS)
    missing = [c for c in every if c != "odradek serve" and f"`{c} " not in doc]
    assert not missing, f"docs/cli.md does not list {missing}"


def test_the_command_keeps_kio_from_loading_hypothesis() -> None:
    """kio registers hypothesis strategies at import when it can import hypothesis (0.4 s
    of every broker's start-up in a test install); the command's entry point prevents it,
    and the broker's modules import without it."""
    code = (
        "import sys\n"
        "from odradek.cli import entry\n"
        "sys.argv = ['odradek', '--version']\n"
        "try:\n"
        "    entry.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "import odradek.broker.server, kio\n"
        "print(sys.modules.get('hypothesis'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.splitlines()[-1] == "None"
