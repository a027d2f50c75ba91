"""`python -m jaxattn ...` is the `jaxattn` command."""

import sys

from jaxattn.cli import main

sys.exit(main())
