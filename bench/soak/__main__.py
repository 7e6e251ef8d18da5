"""``python -m bench.soak``: see ``bench/soak/run.py``."""

import sys

from bench.soak.run import main

sys.exit(main())
