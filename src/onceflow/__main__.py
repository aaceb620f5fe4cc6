"""`python -m onceflow ...` is the `onceflow` command."""

import sys

from onceflow.cli.main import main

sys.exit(main())
