"""The build, a folder per stage, data flowing one way (``pipeline.STAGES`` runs them):

    inputs/   the model file, the options, the shapes, the environment, the inputs' names
    trace/    torch.export + TorchInductor on a virtual GPU -> ``graph.Graph`` (plain data);
              the only folder that touches torch's private API
    kernels/  kernels of ours, a folder per family: rewrites before Inductor, lowerings after
    plan/     dependency levels, combo partition, block sizes by rule
    codegen/  combo kernels and the package's program from ``templates/``; checked on meta tensors
    compile/  Triton -> cubin and PTX per arch, no GPU; the runtime's C extensions
    package/  the manifest, the weights, the wheels
    cache/    traces and kernels kept between builds, keyed by exact fingerprints

``graph`` is the data every stage after the trace reads.
"""
