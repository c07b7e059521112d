"""Stand-in for spaCy on the GPU machine (benchmarks/gpu_check.sh), LAVIS process only.

LAVIS 1.0.2 imports spaCy at module level for its img2prompt VQA model, which the GPU
check never builds; the real package and its compiled dependencies (~50 MB of wheels)
do not fit the 64 MiB that travels to that machine. Any use says so.
"""


def __getattr__(name: str):
    raise ImportError(f"spacy.{name}: spaCy is a stand-in in the GPU check's LAVIS overlay "
                      "(benchmarks/gpu_stubs); LAVIS' img2prompt model cannot run there")
