"""The token file: several clients, each with its own bearer token and quotas.

`jaxattn serve --tokens clients.toml` reads a TOML file with one table per
client (the format is documented in docs/server.md, "Clients and quotas"):

    [clients.alice]
    token_sha256 = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"
    requests_per_s = 20
    tokens_per_s = 50000
    concurrent_calls = 4
    result_mib = 1024
    result_mib_per_s = 200
    expires = 2027-01-01T00:00:00Z

    [clients.bob]
    token = "a long random string"

A malformed file is refused whole, at start, with an `InputError` naming the
file and line (TOML syntax) or the client, field and line (a bad value). Only
the SHA-256 digests of the tokens are kept; an offered token is hashed and
compared with every client's digest in constant time (`hmac.compare_digest`).
The client's name is what logs and refusals show, never its token.
`ClientTable.reload` re-reads the file (SIGHUP, `service.main`): a bad file
leaves the clients in force unchanged.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import hmac
import math
import re
import sys
import threading
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

from jaxattn.errors import InputError
from jaxattn.netaddr import token_problem
from service.quotas import ClientQuota

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclasses.dataclass(frozen=True)
class Limits:
    """One client's quotas; None: no such limit.

    Attributes:
      requests_per_s: Capture calls per second.
      tokens_per_s: tokens per second the requests' forwards process (all texts of a
        request, special tokens included; a generating request's steps too:
        `ParsedRequest.work_tokens`).
      concurrent_calls: Capture calls in progress at once.
      result_mib: most output MiB of one request (refused before any compute).
      result_mib_per_s: output MiB per second (each request's output, sized before compute).
      burst_s: each rate's bucket holds this many seconds of it (default 1).
    """

    requests_per_s: float | None = None
    tokens_per_s: float | None = None
    concurrent_calls: int | None = None
    result_mib: float | None = None
    result_mib_per_s: float | None = None
    burst_s: float = 1.0


@dataclasses.dataclass(frozen=True)
class Client:
    """A client of the token file: its name, its token's SHA-256, its expiry and limits."""

    name: str
    digest: bytes
    limits: Limits
    expires: datetime.datetime | None = None


LIMIT_FIELDS = tuple(f.name for f in dataclasses.fields(Limits))
FIELDS = ("token", "token_sha256", "expires", *LIMIT_FIELDS)


def token_digest(token: str | bytes) -> bytes:
    """The SHA-256 of a token, as the table keeps it (`token_sha256` is its hex)."""
    return hashlib.sha256(token.encode() if isinstance(token, str) else token).digest()


def parse_clients(text: str, path: str | Path = "<tokens>") -> tuple[Client, ...]:
    """The clients of a token file's text.

    Raises:
      InputError: bad TOML (its line), no clients, or a bad client, field or value
        (named, with its line where it can be found).
    """
    # A byte-order mark (Windows editors save one) is no TOML, and no content either:
    # "Invalid statement" at line 1 named nothing an operator could see.
    text = text.removeprefix("\ufeff")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        line = getattr(e, "lineno", None) or _line_of(str(e))
        if line is None and "end of document" in str(e):
            line = max(1, len(_lines(text.removesuffix("\n"))))
        reason = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)$", "", str(e))
        raise InputError(line, f"not valid TOML: {reason}", path) from None
    except ValueError as e:  # an integer of more digits than Python converts (4300)
        raise InputError(_number_line(text), f"not valid TOML: {e}", path) from None
    except RecursionError:  # arrays or inline tables nested thousands deep
        raise InputError(None, "not valid TOML: nested too deeply", path) from None
    extra = sorted(set(doc) - {"clients"})
    if extra:
        key = extra[0]
        raise InputError(
            _find(text, rf"\[?\s*{re.escape(key)}\b"),
            f"unknown top-level key {key!r}: give each client as a [clients.NAME] table",
            path,
        )
    tables = doc.get("clients")
    if not isinstance(tables, dict) or not tables:
        raise InputError(None, "no clients: give at least one [clients.NAME] table", path)
    clients, seen = [], {}
    for name, table in tables.items():
        client = _client(text, path, name, table)
        if client.digest in seen:
            raise InputError(
                _field_line(text, name, "token") or _field_line(text, name, "token_sha256"),
                f"[clients.{name}]: the same token as [clients.{seen[client.digest]}]: "
                "every client needs its own",
                path,
            )
        seen[client.digest] = name
        clients.append(client)
    return tuple(clients)


def _client(text: str, path, name: str, table) -> Client:
    def bad(field: str | None, reason: str) -> InputError:
        line = _field_line(text, name, field) if field else _table_line(text, name)
        where = f"[clients.{name}]" + (f" {field}" if field else "")
        return InputError(line, f"{where}: {reason}", path)

    if not _NAME.fullmatch(name):
        raise bad(None, "a client name is 1-64 letters, digits and _.@- (it appears in logs)")
    if not isinstance(table, dict):
        raise bad(None, f"expected a table of fields, got {type(table).__name__}")
    for field in table:
        if field not in FIELDS:
            raise bad(field, f"unknown field; the fields are {', '.join(FIELDS)}")
    if ("token" in table) == ("token_sha256" in table):
        raise bad(None, "give exactly one of token and token_sha256")
    if "token" in table:
        token = table["token"]
        why = token_problem(token) if isinstance(token, str) else "not a string"
        if why:
            raise bad("token", f"expected a non-empty token a client can send: {why}")
        digest = token_digest(token)
    else:
        hexed = table["token_sha256"]
        if not isinstance(hexed, str) or not _HEX64.fullmatch(hexed):
            raise bad("token_sha256", "expected 64 lowercase hex digits (sha256sum of the token)")
        digest = bytes.fromhex(hexed)
    expires = table.get("expires")
    if expires is not None and not (
        isinstance(expires, datetime.datetime) and expires.tzinfo is not None
    ):
        raise bad("expires", "expected a date and time with its offset, e.g. 2027-01-01T00:00:00Z")
    values = {}
    for field in LIMIT_FIELDS:
        if field not in table:
            continue
        value = table[field]
        integer = field == "concurrent_calls"
        ok = isinstance(value, int) if integer else isinstance(value, (int, float))
        ok = ok and not isinstance(value, bool)
        if ok and not integer:
            try:
                value = float(value)  # an integer of 400 digits: past any float
            except OverflowError:
                ok = False
        finite = ok and (integer or math.isfinite(value))  # an int is; isfinite overflows
        if not ok or not value > 0 or not finite:
            kind = "an integer >= 1" if integer else "a number > 0"
            got = _short(table[field])  # as written, not as converted
            raise bad(field, f"expected {kind} (leave it out for no limit), got {got}")
        values[field] = value
    burst = values.get("burst_s", 1.0)
    for field in ("requests_per_s", "tokens_per_s", "result_mib_per_s"):
        if field in values and not values[field] * burst > 0:  # both tiny: a bucket of 0
            raise bad(field, f"{values[field]!r} per s for burst_s {burst!r} s holds nothing")
    return Client(name, digest, Limits(**values), expires)


def _short(value) -> str:
    """repr(value), shortened where it is long."""
    if isinstance(value, int) and value.bit_length() > 1000:  # repr: slow, or refused
        return f"a whole number of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-10:]} ({len(text)} chars)"


def _line_of(message: str) -> int | None:
    m = re.search(r"at line (\d+)", message)
    return int(m.group(1)) if m else None


def _lines(text: str) -> list[str]:
    """The file's lines as TOML (and an editor) counts them: split at LF only, not at the
    CR, form feed or U+2028 a TOML string may hold and str.splitlines breaks at."""
    return text.split("\n")


def _number_line(text: str) -> int | None:
    """The line of the first run of more digits than Python converts to an int."""
    limit = sys.get_int_max_str_digits()
    for i, line in enumerate(_lines(text)):
        if any(len(run) > limit for run in re.findall(r"[0-9_]+", line)):
            return i + 1
    return None


def _find(text: str, pattern: str, start: int = 0) -> int | None:
    """1-based line of the first line from line `start` (0-based) matching `pattern`."""
    lines = _lines(text)
    for i in range(start, len(lines)):
        if re.match(rf"\s*{pattern}", lines[i]):
            return i + 1
    return None


def _table_line(text: str, name: str) -> int | None:
    quoted = rf"(?:{re.escape(name)}|\"{re.escape(name)}\"|'{re.escape(name)}')"
    return _find(text, rf"\[\s*clients\s*\.\s*{quoted}\s*\]")


def _field_line(text: str, name: str, field: str) -> int | None:
    """The line of `field` in the [clients.NAME] table (best effort; None if not found)."""
    header = _table_line(text, name)
    if header is None:
        return None
    for i, line in enumerate(_lines(text)[header:], start=header):
        if re.match(r"\s*\[", line):
            return None  # the next table: not in this one
        if re.match(rf"\s*{re.escape(field)}\s*=", line):
            return i + 1
    return None


class ClientTable:
    """The clients of a token file and their quota state; looks tokens up.

    Args:
      path: the token file (read now; `reload` reads it again).
      clock: the quotas' clock (time.monotonic; a fake one in tests).
      now: the wall clock for `expires` (time.time).

    Raises:
      InputError: a malformed file (see `parse_clients`); OSError: unreadable.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], float] = time.time,
    ):
        self.path = Path(path)
        self.clock = clock
        self.now = now
        self._lock = threading.Lock()
        self._entries: tuple[tuple[Client, ClientQuota], ...] = ()
        self._install(self._read())

    def _read(self) -> tuple[Client, ...]:
        try:
            # Bytes decoded, not read_text: its universal newlines would take a lone CR
            # (not a TOML newline) for a line break, and the lines told for another file's.
            text = self.path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(None, f"not UTF-8: {e}", self.path) from None
        return parse_clients(text, self.path)

    def _install(self, clients: tuple[Client, ...]) -> None:
        with self._lock:
            old = {c.name: (c, q) for c, q in self._entries}
            entries = []
            for client in clients:
                if client.name not in old:
                    quota = ClientQuota(client.name, client.limits, self.clock)
                else:  # the same object, which its calls in progress `leave` when they end
                    quota = old[client.name][1]
                    if old[client.name][0].limits != client.limits:
                        quota.set_limits(client.limits)  # new buckets; same limits keep theirs
                entries.append((client, quota))
            self._entries = tuple(entries)

    def reload(self) -> None:
        """Read the file again; the new clients replace the old (a client whose
        limits are unchanged keeps its buckets). A bad file changes nothing.

        Raises:
          InputError, OSError: as at start.
        """
        self._install(self._read())

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c, _ in self._entries)

    def quota(self, name: str) -> ClientQuota:
        """The quota state of the client called `name` (KeyError if none)."""
        return {c.name: q for c, q in self._entries}[name]

    def lookup(self, token: str | bytes) -> tuple[ClientQuota | None, str]:
        """(the quota of the client with this token, ""), or (None, "") for an unknown
        token, or (None, when it expired) for an expired one.

        Every client's digest is compared, in constant time, whatever matches.
        """
        offered = token_digest(token)
        found = None
        for client, quota in self._entries:  # no early exit: time tells nothing
            if hmac.compare_digest(offered, client.digest):
                found = (client, quota)
        if found is None:
            return None, ""
        client, quota = found
        if client.expires is not None and self.now() >= client.expires.timestamp():
            when = client.expires.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            return None, f"this bearer token expired at {when}: ask for a new one"
        return quota, ""
