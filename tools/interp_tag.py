"""The interpreter tag: sys.implementation.cache_tag, plus "t" for a
free-threaded build (cpython-311, cpython-313t).  It names the per-
interpreter folders and files: virtual environments (tools/test,
tools/demo, benchmarks/run_all.sh), wheels (tools/package) and benchmark
results (benchmarks/harness.py).

    PYTHON tools/interp_tag.py      prints PYTHON's tag

Shell scripts run it with the interpreter they ask about (with -I, so
nothing from the environment is imported); benchmarks/harness.py loads
interp_tag() from this file.  Stdlib only.
"""

import sys
import sysconfig


def interp_tag():
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    return sys.implementation.cache_tag + ("t" if free_threaded else "")


if __name__ == "__main__":
    print(interp_tag())
