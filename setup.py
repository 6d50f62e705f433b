"""Build the seqlock_py._seqlock extension.

Environment:
  SEQLOCK_STRICT=1                  add -Werror (the test command sets it)
  SEQLOCK_SANITIZE=thread|address   build with that sanitizer (address also
                                    enables undefined-behaviour checks)
"""
import glob
import os
import sys

from setuptools import Extension, setup

# The extension is the binding (src/_seqlock/) compiled with the C11 core
# (src/libseqlock/, no Python in it): a new file in either folder needs no
# edit here.
CORE, BINDING = "src/libseqlock", "src/_seqlock"
SOURCES = sorted(glob.glob(f"{BINDING}/*.c")) + sorted(glob.glob(f"{CORE}/*.c"))
DEPENDS = sorted(glob.glob(f"{BINDING}/*.h")) + sorted(glob.glob(f"{CORE}/*.h"))


def compiler_flags():
    compile_args, link_args = [], []
    if sys.platform == "win32":
        return ["/std:c11", "/experimental:c11atomics"], link_args
    # Hidden visibility: only PyInit__seqlock is exported, and calls between
    # the extension's files bind directly instead of through the PLT.
    compile_args += ["-std=c11", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wno-missing-field-initializers"]
    if os.environ.get("SEQLOCK_STRICT") == "1":
        compile_args.append("-Werror")
    sanitize = os.environ.get("SEQLOCK_SANITIZE", "")
    # Hardening that costs nothing measurable (docs/benchmarks.md): a
    # canary on frames with arrays (the record's stack scratch), and the C
    # library's checked string functions.  The sanitizers check more.
    compile_args.append("-fstack-protector-strong")
    if not sanitize:
        compile_args += ["-U_FORTIFY_SOURCE", "-D_FORTIFY_SOURCE=2"]
    if sanitize:
        kinds = {"thread": "thread", "address": "address,undefined"}
        if sanitize not in kinds:
            sys.exit(f"SEQLOCK_SANITIZE must be 'thread' or 'address', not {sanitize!r}")
        flags = [f"-fsanitize={kinds[sanitize]}", "-fno-omit-frame-pointer", "-g"]
        if sanitize == "thread":
            flags.append("-Wno-tsan")  # gcc: TSan does not model atomic_thread_fence
        compile_args += flags
        link_args += flags
    return compile_args, link_args


compile_args, link_args = compiler_flags()

setup(
    ext_modules=[
        Extension(
            "seqlock_py._seqlock",
            sources=SOURCES,
            depends=DEPENDS,
            include_dirs=[CORE, BINDING],
            extra_compile_args=compile_args,
            extra_link_args=link_args,
        )
    ],
)
