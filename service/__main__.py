"""`python -m service ...` is `jaxattn serve ...`."""

import sys

from service.main import main

sys.exit(main())
