"""`python -m cli`: the `subagent-engine` command without the console script (child processes)."""

import sys

from cli import main

sys.exit(main())
