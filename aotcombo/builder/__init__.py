"""The build, one module per stage, data flowing one way:

    modelfile -> shapes -> trace (inductor) -> plan (blocks) -> codegen -> compiler -> manifest -> wheel

``pipeline.build_package`` runs them; ``options`` checks what the user asked for first.
``inductor`` is the only module that touches TorchInductor's private API; ``graph`` is the
plain data it hands on. ``cache`` and ``fingerprint`` keep traces and kernels between
builds; ``environment`` holds the versions built with and run on; ``native`` compiles the
runtime's C launcher; ``usercode`` tells the user's code from the libraries'.
"""
