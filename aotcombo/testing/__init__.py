"""aotcombo's own test support: what its tests, scripts and benchmarks share (as ``torch.testing``
serves PyTorch's). Not the package API: nothing here is promised to users, and names change as
the tests need.

Modules, each with one job (import the one you need; importing this package imports none):

- ``paths``: the source checkout and its ``sample_models/`` (these helpers need a checkout);
- ``compare``: ``relative_error``, the one error measure, and the tolerances per dtype;
- ``gpu``: built packages on a GPU: the samples, fresh inputs, threads, launch counts;
- ``zoo``, ``llm``: the zoo's and the LLM decode sample's model files, weights and checks;
- ``corpora``: the tests' model corpora (``tests/models/coverage_models.py``, one model per
  construct Inductor can emit; ``tests/models/combo_test_models.py``, PyTorch's combo-kernel
  tests as models), loaded by path: model code stays outside this package (see there why);
- ``combo``: building a combo-test case, counting its launches and checking it;
- ``graphs``: synthetic builder graphs for the planner and codegen tests;
- ``manifests``: small manifests for runtime tests; ``native``: the runtime's C extensions
  compiled for a test session;
- ``timing``: synchronized timers, host launch counts, copy and matmul ceilings (benchmarks).

Heavy libraries (transformers, timm) are imported where they are used, and what the GPU tests
and benchmarks use (``paths``, ``compare``, ``gpu``, ``zoo``, ``llm``, ``combo``, ``corpora``,
``timing``) imports no part of the builder at import time: the GPU machine's torch may be one the
builder does not support.
"""
