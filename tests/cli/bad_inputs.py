"""The one table of bad inputs every command is run against (tests/cli/test_cli_bad_input.py).

A command declares its argument template in COMMANDS, with {slot} placeholders
filled by good values (GOOD); a row of BAD replaces one slot with a bad value,
or appends flags, and says the exit code and the message the user must get.
Every (command, row) pair whose slot the command has is run: a template slot,
or an option the command's real parser takes (`HAS`, read from the parsers
`jaxattn.cli.build_parser` builds), so a new command inherits the whole table
by adding one line to COMMANDS, and a new option of a command the rows of
that option. Every option of every parser has a row or is named in
ANY_VALUE (tests/cli/test_cli_options.py checks both).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
from collections.abc import Callable
from pathlib import Path

# command -> its argv, with {slots}. Only bad rows run, so no command does real work.
COMMANDS: dict[str, list[str]] = {
    "capture": ["capture", "{text}", "--model", "{model}", "--out", "{out}", "{flags}"],
    "view": ["view", "{input}", "--model", "{model}", "--out", "{out}", "{flags}"],
    "analyze": [
        "analyze",
        "{input_file}",
        "--model",
        "{model}",
        "--out",
        "{out}",
        "--quiet",
        "{flags}",
    ],
    "dump": [
        "dump",
        "{input_file}",
        "--model",
        "{model}",
        "--out",
        "{store}",
        "--quiet",
        "{flags}",
    ],
    "bench": [
        "bench",
        "--conllu",
        "{input_file}",
        "--model",
        "{model}",
        "--json",
        "{out}",
        "-n",
        "2",
        "--repeats",
        "1",
        "{flags}",
    ],
    "convert": ["convert", "{model}", "{out_dir}", "{flags}"],
    "demo": ["demo", "--model", "{model}", "{flags}"],
    "serve": ["serve", "--model", "{model}", "--port", "0", "{flags}"],
    "web": ["web", "--model", "{model}", "--port", "0", "{flags}"],
    "loadtest": [
        "loadtest",
        "--server",
        "{server}",
        "--requests",
        "1",
        "--json",
        "{out}",
        "--conllu",
        "{input_file}",
        "{flags}",
    ],
    "cache": ["cache", "{cache_action}", "{flags}"],
}


@dataclasses.dataclass(frozen=True)
class Bad:
    """One bad input: the slot it fills (or flags it adds), its exit code and message."""

    name: str
    slot: str
    make: Callable[[Path, dict], object]  # (tmp dir, good values) -> the bad value
    code: int
    message: str  # a regex the one error line must match
    only: frozenset = frozenset()  # the commands it applies to (default: every one with the slot)
    covers: tuple[str, ...] = ()  # the options its bad value is for (default: its slot's)


def _file(name: str, data: bytes) -> Callable[[Path, dict], str]:
    def make(tmp: Path, good: dict) -> str:
        (tmp / name).write_bytes(data)
        return str(tmp / name)

    return make


def _broken_model(edit: Callable[[Path], None]) -> Callable[[Path, dict], str]:
    def make(tmp: Path, good: dict) -> str:
        copy = tmp / "model-copy"
        shutil.copytree(good["model"], copy)
        edit(copy)
        return str(copy)

    return make


def _truncate_weights(d: Path) -> None:
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _break_config(d: Path) -> None:
    (d / "config.json").write_text('{"model_type": "bert"\n"hidden_size": 15}')


def _wrong_hidden_size(d: Path) -> None:
    import json

    config = json.loads((d / "config.json").read_text())
    config["hidden_size"], config["num_attention_heads"] = 18, 3
    (d / "config.json").write_text(json.dumps(config))


def _non_empty_dir(tmp: Path, good: dict) -> str:
    (tmp / "full").mkdir()
    (tmp / "full" / "data.bin").write_bytes(b"someone's data")
    return str(tmp / "full")


def _existing(tmp: Path, good: dict) -> str:
    (tmp / "exists.out").write_text("keep me")
    return str(tmp / "exists.out")


# The commands that are a server's clients (--server, --token-file).
CLIENTS = frozenset({"capture", "view", "analyze", "web", "loadtest"})

BAD: list[Bad] = [
    # inputs
    Bad("missing input file", "input_file", lambda t, g: str(t / "missing.txt"), 2, "missing.txt"),
    Bad("missing input", "input", lambda t, g: str(t / "missing.npz"), 2, "missing.npz.*no such"),
    # a store's name, not a sentence to capture (it was captured as the text "nope.zarr")
    Bad(
        "missing store",
        "input",
        lambda t, g: "no-such-store.zarr",
        2,
        "no-such-store.zarr.*no such",
    ),
    Bad("input is a directory", "input_file", lambda t, g: str(t), 2, "is a directory"),
    Bad("input is a directory", "input", lambda t, g: str(t), 2, "is a directory"),
    Bad(
        "non-UTF-8 input file",
        "input_file",
        _file("latin.txt", b"fine\ncaf\xe9\n"),
        1,
        r"latin.txt:2.*UTF-8",
    ),
    Bad(
        "non-UTF-8 input file",
        "input",
        _file("latin.txt", b"fine\ncaf\xe9\n"),
        1,
        r"latin.txt:2.*UTF-8",
    ),
    Bad("empty input file", "input_file", _file("empty.txt", b"\n  \n"), 1, "no examples"),
    Bad("empty input file", "input", _file("empty.txt", b"\n  \n"), 1, "no example"),
    Bad("not a capture file", "input", _file("junk.npz", b"not a zip"), 1, "junk.npz"),
    # texts
    Bad("non-UTF-8 text argument", "text", lambda t, g: "caf\udce9", 1, "not valid UTF-8.*0xe9"),
    Bad("lone surrogate", "text", lambda t, g: "a\ud800b", 1, "surrogate U\\+D800"),
    Bad("text over the limit", "text", lambda t, g: "word " * 100, 1, "--too-long truncate"),
    Bad("a 300-word argument", "input", lambda t, g: "word " * 300, 1, "--too-long truncate"),
    Bad("an empty text", "text", lambda t, g: "  ", 1, "TEXT is empty"),
    Bad("an empty text", "input", lambda t, g: "", 1, "INPUT is empty"),
    Bad("an empty sentence B", "text", lambda t, g: "a ||| ", 1, "sentence B is empty"),
    Bad("an empty sentence A", "input", lambda t, g: " ||| b", 1, "sentence A of INPUT .* empty"),
    Bad(  # not an example of [CLS] [SEP] (on the first line: bench reads only that one)
        "an empty side of a pair in an input file",
        "input_file",
        _file("side.txt", b" ||| only b\nfine\n"),
        1,
        r"side.txt:1: sentence A of the pair is empty",
    ),
    Bad(
        "an empty JSONL text",
        "input",
        _file("empty.jsonl", b'{"text": "fine"}\n{"text": ""}\n'),
        1,
        r'empty.jsonl:2: "text" is empty',
    ),
    Bad(  # any other word after --stats-first is an INPUT (view --stats-first ewt.zarr)
        "a misspelt --stats-first",
        "--stats-first",
        lambda t, g: ["--stats-first", "statistcs"],
        2,
        r"--stats-first: invalid choice: 'statistcs': did you mean 'statistics'\?",
    ),
    Bad("a text of 3 parts", "text", lambda t, g: "a ||| b ||| c", 1, r"more than one '\|\|\|'"),
    Bad(
        "standard input",
        "input_file",
        lambda t, g: "-",
        2,
        "needs a regular file",
        frozenset({"dump"}),
    ),
    Bad(
        "a text over the limit past the first window",
        "input_file",
        _file("long.txt", b"short\n" * 300 + b"word " * 100 + b"\n"),
        1,
        r"long.txt:301.*--too-long|text 300 .*--too-long",
        frozenset({"analyze", "view", "dump"}),
    ),
    # outputs
    Bad("output is a directory", "out", lambda t, g: str(t), 2, "is a directory"),
    Bad(
        "output ends in / (a new directory)",
        "out",
        lambda t, g: f"{t}/new/",
        2,
        r"new/ ends in '/', a directory, and names no file",
    ),
    Bad("output exists", "out", _existing, 2, "exists.*--overwrite"),
    Bad(
        "output under a file",
        "out",
        lambda t, g: _existing(t, g) + "/out.x",
        2,
        "exists.out is a file, not a directory",
    ),
    Bad("store is a file", "store", _existing, 2, "exists.out"),
    Bad("empty store name", "store", lambda t, g: "", 2, "--out is empty"),
    Bad(
        "store under a file",
        "store",
        lambda t, g: _existing(t, g) + "/s.zarr",
        2,
        "exists.out is a file, not a directory",
    ),
    Bad("convert into a non-empty directory", "out_dir", _non_empty_dir, 2, "not empty"),
    Bad(
        "convert into its own checkpoint",
        "out_dir",
        lambda t, g: str(g["model"]),
        2,
        "inside the checkpoint",
    ),
    # checkpoints
    Bad("missing model", "model", lambda t, g: str(t / "no-model"), 2, "no-model"),
    Bad("model is a file", "model", _existing, 2, "exists.out.*directory"),
    Bad("truncated weights", "model", _broken_model(_truncate_weights), 1, "model.safetensors"),
    Bad("broken config.json", "model", _broken_model(_break_config), 1, "config.json.*line 2"),
    Bad(
        "hidden_size against the weights",
        "model",
        _broken_model(_wrong_hidden_size),
        1,
        r"shape.*15.*18|18.*15",
    ),
    # the command line
    Bad(
        "layer out of range",
        "--layers",
        lambda t, g: ["--layers", "9"],
        2,
        "layer 9 is out of range",
    ),
    Bad("bad layer syntax", "--layers", lambda t, g: ["--layers", "1:x"], 2, "'1:x'.*range"),
    Bad(
        "chunks of a few numbers",
        "--chunk-bytes",
        lambda t, g: ["--chunk-bytes", "1"],
        2,
        "--chunk-bytes 1 is too small: at least 4096",
    ),
    Bad(
        "a CA file that is not PEM",
        "--tls-ca",
        lambda t, g: ["--server", "127.0.0.1:9", "--tls-ca", _existing(t, g)],
        2,
        "exists.out is not a PEM CA certificate",
    ),
    Bad(
        "a negative duration",
        "--duration",
        lambda t, g: ["--duration", "-1"],
        2,
        "--duration: expected a number > 0, got -1",
    ),
    Bad(
        "a missing --conllu file",
        "--conllu",
        lambda t, g: ["--conllu", str(t / "missing.conllu")],
        2,
        "missing.conllu",
    ),
    Bad("unknown option", "flags", lambda t, g: ["--no-such-option"], 2, "--no-such-option"),
    Bad(
        "a misspelt cache action",
        "cache_action",
        lambda t, g: "clean",
        2,
        r"ACTION: invalid choice: 'clean' .*did you mean 'clear'\?",
    ),
    Bad(
        "unknown synthetic model",
        "--synthetic",
        lambda t, g: ["--synthetic", "gpt-2"],
        2,
        "invalid choice: 'gpt-2'",
    ),
    Bad(
        "a synthetic text of 1 token",
        "--synthetic",
        lambda t, g: ["--synthetic", "bert-base", "--tokens", "1"],
        2,
        "cannot hold a word between \\[CLS\\] and \\[SEP\\]",
        covers=("--tokens",),
    ),
    Bad(
        "a malformed token file",
        "--tokens",
        lambda t, g: [
            "--tokens",
            _file("clients.toml", b'[clients.a]\ntoken = "x"\nrequests_per_s = -1\n')(t, g),
        ],
        1,
        r"clients\.toml:3: \[clients\.a\] requests_per_s: expected a number > 0",
        only=frozenset({"serve"}),
    ),
    Bad(
        "an empty token file",
        "--token-file",
        lambda t, g: ["--token-file", _file("token", b"\n")(t, g)],
        1,
        r"token file \S*token is empty",
        only=frozenset({"serve"}),
    ),
    Bad(
        "an empty token file",
        "--token-file",
        lambda t, g: ["--server", "127.0.0.1:9", "--token-file", _file("token", b"\n")(t, g)],
        1,
        r"token file \S*token is empty",
        only=CLIENTS,
    ),
    Bad(
        "a model and a synthetic one",
        "--synthetic",
        lambda t, g: ["--synthetic", "bert-base"],
        2,
        "exclude each other",
    ),
    Bad(
        "a server limit past ModelInfo's uint32 (every client's model_info failed: UNKNOWN)",
        "--max-new-tokens",
        lambda t, g: ["--max-new-tokens", str(1 << 32)],
        2,
        r"--max-new-tokens: expected a number <= 4294967295 \(a server's limit is a uint32\)",
        only=frozenset({"serve"}),
    ),
    Bad(
        "no token to generate",
        "--generate",
        lambda t, g: ["--generate", "0"],
        2,
        "--generate: expected a number >= 1, got 0",
    ),
    Bad(
        "generating with an encoder",
        "--generate",
        lambda t, g: ["--generate", "3"],
        2,
        r"is an encoder \(bert, bidirectional\): generating text needs a decoder",
    ),
    Bad("--ignore-eos alone", "--ignore-eos", lambda t, g: ["--ignore-eos"], 2, "--generate"),
    Bad(
        "unreachable server",
        "--server",
        lambda t, g: ["--server", "127.0.0.1:9", "--timeout", "3"],
        1,
        "UNAVAILABLE",
        frozenset({"capture", "view", "analyze", "web"}),  # the commands with --timeout
    ),
    Bad(
        "an endless timeout (gRPC's deadline overflowed: an instant DEADLINE_EXCEEDED)",
        "--timeout",
        lambda t, g: ["--server", "127.0.0.1:9", "--timeout", "inf"],
        2,
        "--timeout: expected a finite number, got inf",
    ),
    Bad(
        "a negative grace",
        "--grace",
        lambda t, g: ["--grace", "-1"],
        2,
        "--grace: expected a number >= 0, got -1",
    ),
    Bad(
        "an endless slow-reader timeout (it stopped the batcher's worker at its first wait)",
        "--slow-reader-s",
        lambda t, g: ["--slow-reader-s", "inf"],
        2,
        "--slow-reader-s: expected a finite number, got inf",
    ),
    Bad(
        "a request limit past gRPC's 32-bit option (an internal OverflowError)",
        "--max-request-mib",
        lambda t, g: ["--max-request-mib", "100000"],
        2,
        r"--max-request-mib: expected a number of MiB below 2048 \(2 GiB: gRPC takes it as a "
        r"32-bit int\), got 100000",
    ),
    Bad(
        "a queue past the server's most (a pool of 100008 handler threads)",
        "--queue-size",
        lambda t, g: ["--queue-size", "100000"],
        2,
        r"--queue-size: expected a number <= 1024 \(each admitted call holds a handler thread; "
        r"for more clients run more replicas\), got 100000",
        only=frozenset({"serve"}),
    ),
    Bad(
        "a result limit past ModelInfo's uint64 (every GetModelInfo failed: UNKNOWN)",
        "--max-result-mib",
        lambda t, g: ["--max-result-mib", "1e30"],
        2,
        r"--max-result-mib: expected a number of MiB below 1\.75922e\+13 \(ModelInfo carries "
        r"it as a uint64 of bytes\), got 1e30",
    ),
    Bad(
        "a missing CA file",
        "--tls-ca",
        lambda t, g: ["--server", "127.0.0.1:9", "--tls-ca", str(t / "missing-ca.pem")],
        2,
        r"--tls-ca \S*missing-ca\.pem: no such file",
    ),
    Bad(
        "a missing certificate",
        "--tls-cert",
        lambda t, g: ["--tls-cert", str(t / "missing.pem"), "--tls-key", _existing(t, g)],
        2,
        r"--tls-cert \S*missing\.pem: no such file",
    ),
    Bad(
        "a key that is a directory",
        "--tls-key",
        lambda t, g: ["--tls-cert", _existing(t, g), "--tls-key", str(t)],
        2,
        r"--tls-key \S+ is a directory: name a file in it",
    ),
]

# A client's flags without --server: refused, not a local capture instead.
for _flag, _make in [("--tls-ca", _existing), ("--token-file", _file("token", b"secret\n"))]:
    BAD.append(
        Bad(
            f"{_flag} without --server",
            _flag,
            lambda t, g, flag=_flag, make=_make: [flag, make(t, g)],
            2,
            rf"{_flag} is for a --server, and none is given .*: add --server HOST:PORT",
            only=CLIENTS - {"loadtest"},  # loadtest requires --server
        )
    )

# A token file's rows, for the server and for the clients (which need --server).
for _name, _make, _code, _message in [
    (
        "a missing token file",
        lambda t, g: str(t / "no-token"),
        2,
        r"--token-file \S*no-token: no such file",
    ),
    (
        "a token file that is a directory",
        lambda t, g: str(t),
        2,
        r"--token-file \S+ is a directory",
    ),
    (
        "a token file that is not UTF-8",
        _file("token", b"\xff\xfe"),
        1,
        r"token file \S*token is not UTF-8 text",
    ),
]:
    for _only, _before in [({"serve"}, []), (CLIENTS, ["--server", "127.0.0.1:9"])]:
        BAD.append(
            Bad(
                _name,
                "--token-file",
                lambda t, g, make=_make, before=_before: [*before, "--token-file", make(t, g)],
                _code,
                _message,
                only=frozenset(_only),
            )
        )


def parsers() -> dict[str, argparse.ArgumentParser]:
    """command -> its real parser, as `jaxattn` builds it."""
    from jaxattn.cli import build_parser

    return dict(build_parser().commands)


PARSERS = parsers()
BOGUS = "bogus-value"  # a value no option's check accepts


def option_name(action: argparse.Action) -> str:
    """How the tables name an option: its longest spelling, or a positional's dest."""
    return max(action.option_strings, key=len) if action.option_strings else action.dest


def refuses(action: argparse.Action, value: str) -> bool:
    """Whether the parser itself refuses `value` for an option (its type or choices)."""
    try:
        value = action.type(value) if action.type is not None else value
    except (argparse.ArgumentTypeError, TypeError, ValueError):
        return True
    return action.choices is not None and value not in action.choices


def checked_rows() -> list[Bad]:
    """A row per option whose parser checks its value (its type or choices refuse BOGUS),
    read from the parsers: refused on the command line (exit 2), naming the option."""
    rows = {}
    for parser in PARSERS.values():
        for action in parser._actions:
            if action.option_strings and action.nargs != 0 and refuses(action, BOGUS):
                flag = option_name(action)
                values = [BOGUS] * (action.nargs if isinstance(action.nargs, int) else 1)
                rows[flag] = Bad(
                    f"{flag} {BOGUS}",
                    flag,
                    lambda t, g, flag=flag, values=values: [flag, *values],
                    2,
                    rf"(?i){re.escape(flag)}\b.*'{BOGUS}'",
                )
    return list(rows.values())


# Options no row gives a bad value, and why: "COMMAND OPTION", or "OPTION" for every
# command that takes it. Switches (no value) need no entry.
ANY_VALUE: dict[str, str] = {
    "view --compare": "A and B: models, capture files or stores, each checked when opened",
    "dump --coordinator": "a host:port for jax.distributed, any string until the job starts",
    "--host": "an address to bind, refused by the OS when the server binds it",
    "convert --ignore-config-field": "any config.json field name",
    "loadtest --model": "the server's model, for the right answers (the template has none)",
    "loadtest --server": "the server under test; the unreachable-server row needs --timeout",
    "view --title": "any text",
    "view --views": "a comma-separated list of views, checked by the view (check_views)",
    "capture text_b": "any text, as TEXT (whose rows these are)",
}

# The hand-written rows, then one per option whose parser checks its value.
ROWS: list[Bad] = [*BAD, *checked_rows()]

# Flags a row may append (its slot starts with "-"), and the commands whose parsers take them.
HAS: dict[str, set[str]] = {
    bad.slot: {c for c, p in PARSERS.items() if bad.slot in p._option_string_actions}
    for bad in ROWS
    if bad.slot.startswith("-")
}


def covered(command: str, bad: Bad) -> set[str]:
    """The options of `command` (`option_name`) a row gives a bad value."""
    parser = PARSERS[command]
    if bad.covers or bad.slot.startswith("-"):
        flags = bad.covers or (bad.slot,)
        return {option_name(parser._option_string_actions[f]) for f in flags}
    template = COMMANDS[command]
    slot = "{" + bad.slot + "}"
    if slot not in template or bad.slot == "flags":  # flags: an unknown option, none of its own
        return set()
    at = template.index(slot)
    before = template[at - 1]
    if before in parser._option_string_actions:
        return {option_name(parser._option_string_actions[before])}
    positionals = [a for a in parser._actions if not a.option_strings]
    filled = [p for p in template[1:at] if p.startswith("{") and p != "{flags}"]
    filled = [
        p for p in filled if template[template.index(p) - 1] not in parser._option_string_actions
    ]
    return {positionals[len(filled)].dest}


def cases() -> list[tuple[str, Bad]]:
    """Every (command, row) pair the table applies to."""
    out = []
    for command, template in COMMANDS.items():
        slots = {part[1:-1] for part in template if part.startswith("{")}
        for bad in ROWS:
            if bad.only and command not in bad.only:
                continue
            if bad.slot in slots or command in HAS.get(bad.slot, ()):
                out.append((command, bad))
    return out


def argv(command: str, bad: Bad, tmp: Path, good: dict) -> list[str]:
    """The command line of a (command, row) pair: good values everywhere but the row's."""
    value = bad.make(tmp, good)
    flags = value if bad.slot in ("flags", *HAS) else []
    out: list[str] = []
    for part in COMMANDS[command]:
        if part == "{flags}":
            out += flags
        elif part.startswith("{"):
            slot = part[1:-1]
            out.append(str(value if slot == bad.slot else good[slot]))
        else:
            out.append(part)
    return out
