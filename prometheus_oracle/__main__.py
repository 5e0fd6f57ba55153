"""``python -m prometheus_oracle``: install (or find) ``prometheus`` and ``promtool`` and print their
paths (``make prometheus``)."""

import sys

from prometheus_oracle.install import main

sys.exit(main())
