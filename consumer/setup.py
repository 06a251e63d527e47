"""The consumer's one native part, optional: its build failing leaves the library whole.

``highwater_consumer._rdbatch`` (C) reads a changefeed's output in batches as Arrow's column
buffers over the librdkafka confluent-kafka ships (loaded at run time: no librdkafka headers
or link here, a C compiler and Python's headers only). Without it the columnar API reads
through confluent-kafka, slower (``highwater_consumer.columnar.NATIVE`` says which).
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildExt(build_ext):
    """``build_ext``, its temporary folder made first.

    The source is one folder up (``../``), so its object file's path goes through that
    folder, which the compiler needs to exist.
    """

    def build_extension(self, ext: Extension) -> None:
        """Build ``ext`` once its temporary folder is there."""
        os.makedirs(self.build_temp, exist_ok=True)
        super().build_extension(ext)


setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[
        Extension(
            "highwater_consumer._rdbatch",
            # relative to this folder (the package is one folder up: pyproject.toml's
            # package-dir); setuptools refuses an absolute path
            sources=["../highwater_consumer/_rdbatch.c"],
            extra_compile_args=["-O2", "-std=gnu11", "-Wall"],
            libraries=["dl"],
            optional=True,  # no compiler: a warning, and the confluent-kafka reader
        )
    ],
)
