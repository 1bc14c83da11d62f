"""Python's collector kept off the objects a trace holds for seconds: the model, the modules
imported, the exported program. A full collection walks every live object; during a trace it
runs many times over the same hundreds of thousands of them (torch, sympy, the graph), none
garbage. ``frozen_heap`` moves what is alive to the collector's permanent generation
(``gc.freeze``) and ``freeze_more`` the objects made since; on leaving, they return to it.
New objects are collected as before. BERT-base on 2 CPUs, whole build in one process: static
6.73-6.78 -> 6.20-6.22 s.

A process that has frozen objects itself (a server before it forks) keeps them frozen: then
this does nothing.
"""

from __future__ import annotations

import contextlib
import gc

_owned = False  # this module froze the objects now frozen


@contextlib.contextmanager
def frozen_heap():
    global _owned
    if _owned or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    _owned = True
    try:
        yield
    finally:
        _owned = False
        gc.unfreeze()


def freeze_more() -> None:
    """Inside ``frozen_heap``: the objects made since, frozen too (a no-op outside it)."""
    if _owned:
        gc.freeze()
