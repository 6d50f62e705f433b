"""python -m seqlock_py: run the demo (see seqlock_py.demo)."""

import sys

from .demo import main

sys.exit(main())
