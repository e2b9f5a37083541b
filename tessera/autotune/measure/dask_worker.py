"""Start a Dask worker that is a measurement device for one target:

    python -m tessera.autotune.measure.dask_worker tls://scheduler:8786 --target "c -num-threads=2" \\
        --tls-ca-file ca.pem --tls-cert worker.pem --tls-key worker.key
    python -m tessera.autotune.measure.dask_worker --print-resource --target "c -num-threads=2"

It announces the target as a Dask resource (`resource_name(target)`) and runs one task at a time,
so it receives only the measurements of that target and never two at once. Without the nanny
(--no-nanny) a dead worker stays dead; with it (the default) it is restarted. The same worker can be
started with Dask's own command: `dask worker ADDRESS --nthreads 1 --resources "<resource>=1"`.

A worker runs whatever task the scheduler gives it (Dask ships pickled functions), so it takes a
tls:// scheduler with the pool's certificates (the CA that signed them, its own certificate and
key; Dask's configuration distributed.comm.tls.* when not given), and a plain tcp:// one only on this
machine's loopback unless --insecure (then a warning says what that allows).
"""
from __future__ import annotations

import argparse
import asyncio
import sys

from ...errors import TesseraError
from .dask import check_pool_address, pool_security, resource_name


async def _serve(address: str, target: str, nanny: bool, name: str | None, security):
    from distributed import Nanny, Worker

    cls = Nanny if nanny else Worker
    async with cls(address, nthreads=1, resources={resource_name(target): 1}, name=name, security=security) as w:
        await w.finished()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tessera.autotune.measure.dask_worker", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("address", nargs="?", help="the Dask scheduler, e.g. tls://host:8786")
    p.add_argument("--target", required=True, help='the target this device measures, e.g. "c -num-threads=2"')
    p.add_argument("--name", default=None, help="the worker's name in the pool")
    p.add_argument("--no-nanny", action="store_true", help="run the worker without a nanny process")
    p.add_argument("--print-resource", action="store_true", help="print the target's resource name and exit")
    p.add_argument("--tls-ca-file", metavar="CA.pem", help="the CA certificate that signed the pool's certificates")
    p.add_argument("--tls-cert", metavar="CERT.pem", help="this worker's certificate (PEM; may hold its key too)")
    p.add_argument("--tls-key", metavar="KEY.pem", help="this worker's private key (PEM)")
    p.add_argument("--insecure", action="store_true",
                   help="accept a plain tcp:// scheduler on another machine: anyone who can reach it or this "
                        "worker runs arbitrary code as this user")
    args = p.parse_args(argv)
    res = resource_name(args.target)
    if args.print_resource:
        print(res)
        return 0
    if not args.address:
        p.error("the scheduler address is required")
    paths = (args.tls_ca_file, args.tls_cert, args.tls_key)
    try:
        if any(paths) and not (args.tls_ca_file and args.tls_cert):
            raise TesseraError("--tls-ca-file and --tls-cert go together (--tls-key unless the key is in the "
                               "certificate's file)")
        security = pool_security(paths if any(paths) else None, role="worker")
        risk = check_pool_address(args.address, security, args.insecure, role="worker", how_to_allow="--insecure",
                                  how_to_secure="--tls-ca-file, --tls-cert, --tls-key")
    except TesseraError as e:
        print(f"tessera measurement worker: error: {e}", file=sys.stderr)
        return 2
    if risk:
        print(f"tessera measurement worker: warning: {risk}", file=sys.stderr, flush=True)
    print(f"tessera measurement worker: target {args.target!r}, resource {res}", file=sys.stderr, flush=True)
    asyncio.run(_serve(args.address, args.target, not args.no_nanny, args.name, security))
    return 0


if __name__ == "__main__":
    sys.exit(main())
