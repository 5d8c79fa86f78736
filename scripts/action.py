"""The GitHub Action's steps: ``reporter.action`` run from the user's checkout, without
arguments for the profiling step, with ``comment`` for the step that comments (the only
one given the token).

``python -m reporter.action`` would put the working directory (the user's repository)
first on ``sys.path``, so a ``reporter/`` folder of theirs would be imported in place of
the installed reporter. A script's folder is put there instead: this one's holds no
package of that name.
"""

import sys

from reporter.action import main

sys.exit(main())
