"""Start a Dask worker that is a measurement device for one target:

    python -m tessera.autotune.measure.dask_worker tcp://scheduler:8786 --target "c -num-threads=2"
    python -m tessera.autotune.measure.dask_worker --print-resource --target "c -num-threads=2"

It announces the target as a Dask resource (`resource_name(target)`) and runs one task at a time,
so it receives only the measurements of that target and never two at once. Without the nanny
(--no-nanny) a dead worker stays dead; with it (the default) it is restarted. The same worker can be
started with Dask's own command: `dask worker ADDRESS --nthreads 1 --resources "<resource>=1"`.
"""
from __future__ import annotations

import argparse
import asyncio
import sys

from .dask import resource_name


async def _serve(address: str, target: str, nanny: bool, name: str | None):
    from distributed import Nanny, Worker

    cls = Nanny if nanny else Worker
    async with cls(address, nthreads=1, resources={resource_name(target): 1}, name=name) as w:
        await w.finished()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tessera.autotune.measure.dask_worker", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("address", nargs="?", help="the Dask scheduler, e.g. tcp://host:8786")
    p.add_argument("--target", required=True, help='the target this device measures, e.g. "c -num-threads=2"')
    p.add_argument("--name", default=None, help="the worker's name in the pool")
    p.add_argument("--no-nanny", action="store_true", help="run the worker without a nanny process")
    p.add_argument("--print-resource", action="store_true", help="print the target's resource name and exit")
    args = p.parse_args(argv)
    res = resource_name(args.target)
    if args.print_resource:
        print(res)
        return 0
    if not args.address:
        p.error("the scheduler address is required")
    print(f"tessera measurement worker: target {args.target!r}, resource {res}", file=sys.stderr, flush=True)
    asyncio.run(_serve(args.address, args.target, not args.no_nanny, args.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
