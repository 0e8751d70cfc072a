"""One BLAS thread for the small products of the calibrators' objectives.

A fit of a few thousand logits spends more time waking BLAS threads than
multiplying; the calibrators limit BLAS to one thread around their solvers.
"""

from __future__ import annotations

from threadpoolctl import ThreadpoolController

_controller: ThreadpoolController | None = None


def single_threaded_blas():
    """A context in which the BLAS libraries run on one thread.

    The controller, whose creation scans the process's loaded libraries (it
    takes longer than a whole binary temperature fit), is made once per process;
    numpy's BLAS, the one the objectives' products use, is loaded before it.
    """
    global _controller
    if _controller is None:
        _controller = ThreadpoolController()
    return _controller.limit(limits=1, user_api="blas")
