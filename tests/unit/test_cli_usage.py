"""The command line's usage contract (docs/USER_GUIDE.md, Command line), at the
argument parser, with no cluster: an error is one line on stderr naming the
command (``zmqueue COMMAND [ACTION]: error: ...``), exit 2 for what the parser
catches (then ``(see `zmqueue COMMAND --help`)``), exit 1 for a number out of
range; a positional may follow the options; a closed stdout ends a command
quietly with status 141."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from zmqueue.cli.main import main


@pytest.fixture(autouse=True)
def no_local_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command these tests run must fail before it starts a cluster (they
    did start one, and ``up --duration nan`` or ``demo`` ran with it)."""
    import zmqueue.localcluster

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a local cluster was started")

    monkeypatch.setattr(zmqueue.localcluster, "LocalCluster", refuse)


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one stderr line of ``main(argv)``, which must exit 2 with nothing on stdout."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    assert info.value.code == 2, err
    assert out == "" and err.endswith("\n") and err.count("\n") == 1, (out, err)
    return err.rstrip("\n")


@pytest.mark.parametrize("argv, command, says", [
    (["status", "--bogus"], "status", "unrecognized arguments: --bogus"),
    (["queue", "create", "x", "--bogus"], "queue create", "unrecognized arguments: --bogus"),
    (["queue", "list", "extra"], "queue list", "unrecognized arguments: extra"),
    (["receive", "q", "--maxx", "3"], "receive", "unrecognized arguments: --maxx 3"),
    (["keys", "list", "--bogus"], "keys list", "unrecognized arguments: --bogus"),
    (["send", "q", "body", "extra"], "send", "unrecognized arguments: extra"),
    (["send", "q", "--attr", "k=v", "body", "extra"], "send", "unrecognized arguments: extra"),
    (["queue", "create"], "queue create", "the following arguments are required: name"),
])
def test_an_unknown_option_or_extra_argument_is_reported_by_the_command_given_it(
        argv: list[str], command: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    """(Reported as the top parser's: ``zmqueue: error: unrecognized arguments: ...
    (see `zmqueue --help`)``, while a missing argument named the command.)"""
    err = usage_error([*argv, "--consul", "127.0.0.1:1"], capsys)
    assert err == f"zmqueue {command}: error: {says} (see `zmqueue {command} --help`)"


def test_an_unknown_option_before_the_command_is_the_top_parsers(capsys: pytest.CaptureFixture[str]) -> None:
    assert usage_error(["--bogus", "status"], capsys) == \
        "zmqueue: error: unrecognized arguments: --bogus (see `zmqueue --help`)"


@pytest.mark.parametrize("argv, body", [
    (["send", "q", "--attr", "k=v", "hello"], "hello"),
    (["send", "q", "--delay", "0", "hello"], "hello"),
    (["send", "q", "--consul", "127.0.0.1:1", "hello"], "hello"),
    (["send", "q", "hello", "--attr", "k=v"], "hello"),
    (["send", "--attr", "k=v", "q", "hello", "--lines"], "hello"),
    (["send", "q", "--attr", "k=v", "--", "-starts-with-a-dash"], "-starts-with-a-dash"),
    (["send", "q", "--attr", "k=v"], "-"),
    (["send", "q", "--attr", "k=v", "-"], "-"),
])
def test_the_body_of_send_may_follow_its_options(argv: list[str], body: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """(Only ``send Q BODY --opts`` worked: after an option, BODY was
    ``unrecognized arguments: hello``.)"""
    import argparse

    import zmqueue.cli.queue_cmds

    given: list[argparse.Namespace] = []

    def cmd_send(args: argparse.Namespace) -> int:
        given.append(args)
        return 0

    monkeypatch.setattr(zmqueue.cli.queue_cmds, "cmd_send", cmd_send)
    assert main(argv) == 0
    [args] = given
    assert (args.queue, args.body) == ("q", body)
    assert args.attr in ([], ["k=v"])


@pytest.mark.parametrize("argv, says", [
    (["demo", "--messages", "-1"], "--messages must be 1 or more, got -1"),
    (["demo", "--messages", "0"], "--messages must be 1 or more, got 0"),
    (["demo", "--keep", "-5"], "--keep must be 0 to 31536000, got -5"),
    (["demo", "--hosts", "0"], "--hosts must be 1 to 16, got 0"),
    (["demo", "--hosts", "17"], "--hosts must be 1 to 16, got 17"),
    (["up", "--duration", "-5"], "--duration must be more than 0 and at most 31536000, got -5"),
    (["up", "--duration", "0"], "--duration must be more than 0 and at most 31536000, got 0"),
    (["up", "--duration", "1e300"], "--duration must be more than 0 and at most 31536000, got 1e+300"),
    (["up", "--hosts", "17"], "--hosts must be 1 to 16, got 17"),
    (["up", "--clusters", "0"], "--clusters must be 1 to 8, got 0"),
    (["usage", "--data", "/nonexistent", "--since-s", "-5"], "--since-s must be 0 or more, got -5"),
    (["usage", "--data", "/nonexistent", "--since-s", "-0.5"], "--since-s must be 0 or more, got -0.5"),
    (["bench", "--runs", "0"], "--runs must be 1 to 50, got 0"),
    (["bench", "--runs", "51"], "--runs must be 1 to 50, got 51"),
    (["bench", "--hosts", "0"], "--hosts must be 1 to 16, got 0"),
    (["bench", "--rate", "-1"], "--rate -1.0: must be a finite number >= 0"),
    (["analytics", "latency", "--data", "/nonexistent", "--rows", "-1"], "--rows must be 0 or more, got -1"),
    # (these were refused by the library, after Consul was asked, naming its parameter: max_messages ...)
    (["receive", "q", "--max", "0", "--consul", "127.0.0.1:1"], "--max must be 1 to 1000, got 0"),
    (["receive", "q", "--wait", "21", "--consul", "127.0.0.1:1"], "--wait must be 0 to 20, got 21"),
    (["receive", "q", "--visibility-timeout", "-1", "--consul", "127.0.0.1:1"],
     "--visibility-timeout must be 0 to 43200, got -1"),
    (["send", "q", "x", "--delay", "901", "--consul", "127.0.0.1:1"], "--delay must be 0 to 900, got 901"),
    (["queue", "redrive", "q", "--max", "0", "--consul", "127.0.0.1:1"], "--max must be 1 or more, got 0"),
])
def test_a_number_out_of_range_is_one_line_and_status_1_before_anything_starts(
        argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    """(``demo --messages -1`` ran the demo and showed ``0/-1`` and negative
    rates; ``up --duration -5`` or ``0`` started everything and stopped at once,
    exit 0; ``demo --keep -5`` and ``usage --since-s -5`` were taken.)"""
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 1, err
    name = " ".join(argv[:2]) if argv[0] in ("analytics", "queue") else argv[0]
    assert err.startswith(f"zmqueue {name}: error: {says}") and err.count("\n") == 1, err
    assert "--help" not in err and out == ""


@pytest.mark.parametrize("argv, option", [
    (["usage", "--data", "/nonexistent", "--since-s", "nan"], "--since-s"),
    (["usage", "--data", "/nonexistent", "--since-s=inf"], "--since-s"),
    (["usage", "--data", "/nonexistent", "--since-s=-inf"], "--since-s"),
    (["up", "--duration", "nan"], "--duration"),
    (["up", "--duration", "inf"], "--duration"),
    (["demo", "--keep", "nan"], "--keep"),
    (["bench", "--rate", "nan"], "--rate"),
    (["bench", "--rate", "inf"], "--rate"),
    (["bench", "--duration", "inf"], "--duration"),
    (["bench", "--warmup", "nan"], "--warmup"),
    (["receive", "q", "--wait", "nan", "--consul", "127.0.0.1:1"], "--wait"),
])
def test_a_number_that_is_not_finite_is_a_usage_error(argv: list[str], option: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """(``usage --since-s nan`` printed a ValueError traceback, ``inf`` an
    OverflowError; ``bench --rate nan`` ran unpaced; ``up --duration nan``
    started everything and stopped at once.)"""
    command = argv[0]
    err = usage_error(argv, capsys)
    value = argv[argv.index(option) + 1] if option in argv else argv[-1].split("=")[1]
    assert err == (f"zmqueue {command}: error: argument {option}: {value!r} is not a finite number "
                   f"(see `zmqueue {command} --help`)")


def test_a_word_that_is_not_a_number_is_still_named_as_argparse_names_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = usage_error(["demo", "--messages", "many"], capsys)
    assert err.startswith("zmqueue demo: error: argument --messages: invalid int value: 'many'")


def test_queue_set_with_nothing_to_set_is_a_usage_error_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    """(It printed ``nothing to change: ...`` on stdout, without ``error:``.)
    Checked before any Consul is asked (none listens at port 1)."""
    err = usage_error(["queue", "set", "q", "--consul", "127.0.0.1:1"], capsys)
    assert err == ("zmqueue queue set: error: nothing to change: give at least one setting "
                   "(see `zmqueue queue set --help`)")


def test_status_with_no_host_registered_is_an_error_on_stderr(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """(``no zmqueue hosts registered ...`` went to stdout, exit 1, no ``error:``.)"""
    import zmqueue.cli.cluster_cmds

    monkeypatch.setattr(zmqueue.cli.cluster_cmds, "list_hosts", lambda client: [])
    assert main(["status", "--consul", "127.0.0.1:1"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "zmqueue status: error: no zmqueue hosts registered in Consul at 127.0.0.1:1\n"


@contextlib.contextmanager
def stdout_without_reader() -> Iterator[None]:
    """sys.stdout: a pipe whose read end is closed (``| head -1`` after its line)."""
    r, w = os.pipe()
    os.close(r)
    saved = sys.stdout
    sys.stdout = pipe = os.fdopen(w, "w")
    try:
        yield
    finally:
        sys.stdout = saved
        pipe.close()


@pytest.mark.parametrize("writer", ["rich", "print"])
def test_a_closed_stdout_ends_a_command_quietly_with_status_141(
        writer: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """(``zmqueue queue list | head`` ended with ``zmqueue queue list: error:
    Broken pipe``, exit 1; what rich prints ended with exit 1, quietly.)"""
    if writer == "rich":  # console.print
        argv = ["keys", "generate", "--out", str(tmp_path)]
    else:  # the csv module on sys.stdout, as print
        (tmp_path / "usage.jsonl").write_text("")
        argv = ["usage", "--data", str(tmp_path), "--csv", "-"]
    with stdout_without_reader():
        code = main(argv)
    assert code == 141  # (128 + SIGPIPE, as a shell reports a command the signal stopped)
    assert capsys.readouterr().err == ""
