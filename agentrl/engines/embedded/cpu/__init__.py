"""The embedded engine's CPU acceleration, behind one interface (``kernels.CpuKernels``, chosen by
``select.select``): kernel selection by CPU flags and dtype, packed weights, the OpenMP team, SGLang's kernels, and
agentrl's own C++ kernels (``csrc/``, built once by ``build.py``). The lean forward is the reference they stand for."""
