"""``COCOEvalCap`` that refuses to run (see the package docstring)."""


class COCOEvalCap:
    def __init__(self, *args, **kwargs):
        raise ImportError("pycocoevalcap is a stand-in in the GPU check's LAVIS overlay "
                          "(benchmarks/gpu_stubs): caption metrics cannot run there")
