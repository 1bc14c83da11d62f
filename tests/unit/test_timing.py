"""aotcombo.testing.timing without a GPU: interleaved timing calls each function in turn."""

import torch

from aotcombo.testing.timing import time_synced_interleaved


def test_interleaved_timing_takes_turns_and_rotates_each_ones_inputs():
    calls = []
    fns = [lambda x: calls.append(("a", x)), lambda x: calls.append(("b", x))]
    summaries = time_synced_interleaved(fns, [[(1,), (2,)], [(9,)]], torch.device("cpu"), 3)
    assert calls == [("a", 1), ("b", 9), ("a", 2), ("b", 9), ("a", 1), ("b", 9)]
    assert [s["n"] for s in summaries] == [3, 3] and all(s["median"] >= 0 for s in summaries)
