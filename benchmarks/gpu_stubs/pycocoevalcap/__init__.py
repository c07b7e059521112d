"""Stand-in for pycocoevalcap on the GPU machine (benchmarks/gpu_check.sh), LAVIS process only.

LAVIS 1.0.2's captioning and dialogue tasks import ``COCOEvalCap`` at module level; the
real wheel (~100 MB, Java scorers included) does not fit the 64 MiB that travels to that
machine, and the retrieval task never calls it.
"""
