"""jaxattn's own error base class (pure Python: the client and the CLI share it).

    try:
        ...
    except jaxattn.JaxattnError as e:   # e.g. a server refused or failed a call
        print(e)

Today `jaxattn.client.AttentionServiceError` (a failed call to a server)
derives from it. Bad arguments and bad input files raise ValueError
(`jaxattn.inputs.InputError`, `jaxattn.wire.WireError`, ... are ValueErrors)
and missing files FileNotFoundError, as Python code expects.
"""

from __future__ import annotations


class JaxattnError(Exception):
    """Base of the errors jaxattn raises itself, with a message meant for the user."""


class DeviceMemoryError(JaxattnError):
    """One example does not fit the device's memory, even in a batch of its own."""
