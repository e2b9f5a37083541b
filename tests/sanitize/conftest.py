"""Starts compiling the sanitizer op kernels as soon as the tests are collected (see
sanitize_run.start_prebuild): the C compilers work while the tests that come first run."""
import os


def pytest_collection_finish(session):
    from sanitize_run import selected_groups, start_prebuild

    from tessera.errors import TesseraError
    from tessera.toolchain import asan_runtime

    groups = selected_groups(session.items)
    if not groups or session.config.option.collectonly or os.environ.get("TESSERA_SANITIZE_NO_PREBUILD"):
        return
    if hasattr(session.config, "workerinput"):   # a pytest-xdist worker: it builds the groups it runs
        return
    try:
        asan_runtime()
    except TesseraError:              # the tests skip; nothing to build
        return
    start_prebuild(groups)
