"""pytest set-up for the whole checkout: the doctests of ``reliacal`` and the suite under tests/.

The examples in the docstrings draw figures without choosing a matplotlib
backend, as a user would in Jupyter (where switching to Agg would stop the
figures showing inline); here they draw with Agg, which needs no display.
"""

import os

os.environ.setdefault("MPLBACKEND", "Agg")
