"""The token file of `jaxattn serve --tokens FILE` (`service.clients.ClientTable`): TOML,
one [clients.NAME] table per client with its token and quotas.

An input is the file's bytes. A file that reads must give clients with names, digests
and limits of the kinds `service.clients` documents, each client's quota must take a
call (`enter`, `charge`, `leave`: a refusal, `QuotaExceeded`, is an answer) and a token
be looked up; a bad file is an `InputError` whose line, where it names one, is a
line of the file. Anything else is a bug of the reader.
"""

from __future__ import annotations

import datetime
import math

from harness import write

from jaxattn.errors import InputError
from service.clients import LIMIT_FIELDS, ClientTable
from service.quotas import QuotaExceeded

DESIGNED = (InputError,)
TOKENS = (b"[clients.", b"]", b"token = ", b"token_sha256 = ", b"expires = ", b"burst_s = ")
TOKENS += (b"requests_per_s = ", b"tokens_per_s = ", b"concurrent_calls = ", b"result_mib = ")
TOKENS += (b"result_mib_per_s = ", b"inf", b"nan", b"5e-324", b"1e308", b"true", b"[[", b'"""')
TOKENS += (b"2027-01-01T00:00:00Z", b"1979-05-27", b"{ token = 'x' }", b"\n", b"'\\u0000'")

_SEEDS = (
    """# docs/server.md, "Clients and quotas"
[clients.alice]
token_sha256 = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"
requests_per_s = 20          # Capture calls per second
tokens_per_s = 50000         # input tokens per second
concurrent_calls = 4
result_mib = 1024
result_mib_per_s = 200
burst_s = 2
expires = 2027-01-01T00:00:00Z

[clients.bob]                # a token and nothing else: no limits
token = "a long random string"
""",
    """[clients]
carol = { token = "c-token", requests_per_s = 0.5, expires = 2020-01-01T00:00:00+01:00 }
"dave.d@x" = { token = 'literal', result_mib = 1e-3 }
""",
    """[clients.'e_1']
token = \"\"\"multi
line\"\"\"
tokens_per_s = 1.5e3
concurrent_calls = 1
""",
)
_NOW = datetime.datetime(2026, 11, 26, tzinfo=datetime.UTC).timestamp()


def seeds() -> list[bytes]:
    return [s.encode() for s in _SEEDS]


def one_input(data: bytes) -> None:
    path = write("clients.toml", data)
    try:
        table = ClientTable(path, clock=lambda: 0.0, now=lambda: _NOW)
    except InputError as e:
        lines = max(1, data.count(b"\n") + 1)
        assert e.line is None or (type(e.line) is int and 1 <= e.line <= lines), (e.line, e)
        assert str(path) in str(e), e
        raise
    assert table.names and len(set(table.names)) == len(table.names), table.names
    for client, quota in table._entries:
        assert isinstance(client.digest, bytes) and len(client.digest) == 32
        for field in LIMIT_FIELDS:
            value = getattr(client.limits, field)
            if value is not None:
                assert type(value) in (int, float) and value > 0, (field, value)
                assert type(value) is int or math.isfinite(value), (field, value)
        try:
            quota.enter()
        except QuotaExceeded:
            continue
        try:
            quota.charge(7, 1 << 20)
        except QuotaExceeded as e:
            assert e.limit in LIMIT_FIELDS, e.limit
        finally:
            quota.leave()
    table.lookup("not any client's token")
