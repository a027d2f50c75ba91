"""--model DIR|NAME[@REV]: the one model argument of every command that takes one.

`add_source_arguments` (`jaxattn.cli.args`) gives it to capture, view, analyze,
serve, dump, bench, web and demo; loadtest has its own, with the same type and
help. The grammar is `jaxattn.checkpoints.model_ref`'s, as `jaxattn.load` takes it.
"""

from __future__ import annotations

import argparse

from jaxattn.errors import UsageError

MODEL_METAVAR = "DIR|NAME[@REV]"
MODEL_HELP = (
    "a local checkpoint directory or a Hugging Face Hub model (NAME or ORG/NAME; @REV: a "
    "branch, tag or commit), downloaded into the Hugging Face cache; an existing directory "
    "wins (docs/models.md)"
)


def model(value: str):
    """--model DIR|NAME[@REV] -> a `jaxattn.checkpoints.model_ref.ModelRef`.

    Only the grammar is checked here (an empty name, "@" without a revision, a
    revision for a local directory, a name that is neither): nothing is read or
    downloaded until the command loads the model.
    """
    from jaxattn.checkpoints.model_ref import parse_model

    try:
        return parse_model(value)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
