"""`python -m rooflinesim.cli`"""

import sys

from . import main

sys.exit(main())
