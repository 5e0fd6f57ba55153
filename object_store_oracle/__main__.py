"""``python -m object_store_oracle``: build (or find) the cached ``weed`` and print its path (``make weed``)."""

import sys

from object_store_oracle.weed_build import main

sys.exit(main())
