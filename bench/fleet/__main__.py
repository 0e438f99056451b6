"""`python -m bench.fleet [--nodes 100,1000 ...]`: the fleet benchmark with its own options."""

import sys

from bench.fleet.run import main

sys.exit(main(sys.argv[1:]))
