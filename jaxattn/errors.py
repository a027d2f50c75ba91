"""jaxattn's own error base class (pure Python: the client and the CLI share it).

    try:
        ...
    except jaxattn.JaxattnError as e:   # anything jaxattn raised on purpose
        print(e)

`jaxattn.client.AttentionServiceError` (a failed call to a server) derives from
it. Bad arguments raise ValueError (and FileNotFoundError for missing files),
as Python code expects.
"""

from __future__ import annotations


class JaxattnError(Exception):
    """Base of the errors jaxattn raises itself, with a message meant for the user."""
