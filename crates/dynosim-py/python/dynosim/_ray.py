"""Sweeps on a Ray cluster: ``dynosim.sweep(spec, out=DIR, ray="local" | ADDRESS)``.

The driver (this process) expands the spec and keeps the store in ``DIR``, exactly as an
in-process sweep does; candidates not yet stored are sent in batches to Ray tasks, each of which
runs the Rust core on its batch (on every core of its node) and returns the outcomes. Outcomes
are stored as batches finish, so an interrupted sweep resumes, and the tables are then written
by the same code as an in-process sweep, so both give the same table.

``ray`` is an optional dependency: ``pip install 'dynosim[ray]'``.
"""

import json
import os

from dynosim import _dynosim


def _evaluate_batch(batch_json):
    """A Ray task: the outcomes of one batch of candidates (JSON in, JSON out)."""
    from dynosim import _dynosim as core

    return core._sweep_evaluate(batch_json)


def sweep_on_ray(spec, out, address, jobs=None, batches_per_cpu=2):
    """Runs the sweep ``spec`` into ``out`` on the Ray cluster at ``address`` (``"local"``
    starts one in this process and stops it afterwards) and returns what ``dynosim.sweep``
    returns."""
    try:
        import ray
    except ImportError as err:
        raise RuntimeError(
            "ray is not installed; install the extra: pip install 'dynosim[ray]'"
        ) from err
    out = os.fspath(out)
    pending = json.loads(_dynosim._sweep_unstored(spec, out))
    if pending:
        started_here = not ray.is_initialized()
        if started_here:
            if address == "local":
                ray.init(include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
        try:
            cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
            count = max(1, min(len(pending), cpus * batches_per_cpu))
            batches = [pending[index::count] for index in range(count)]
            task = ray.remote(_evaluate_batch)
            running = [task.remote(json.dumps(batch)) for batch in batches]
            while running:
                done, running = ray.wait(running, num_returns=1)
                _dynosim._sweep_store(out, ray.get(done[0]))
        finally:
            if started_here:
                ray.shutdown()
    return _dynosim.sweep(spec, out=out, jobs=jobs)


def _main(argv=None):
    """``python -m dynosim._ray SPEC --out DIR --ray ADDRESS [--jobs N]``: what ``dynosim sweep
    --ray`` runs (the Rust binary cannot start Ray itself). Prints the sweep's summary."""
    import argparse
    import sys

    import dynosim

    parser = argparse.ArgumentParser(prog="dynosim sweep", description=_main.__doc__)
    parser.add_argument("spec")
    parser.add_argument("--out", required=True)
    parser.add_argument("--ray", required=True)
    parser.add_argument("--jobs", type=int)
    args = parser.parse_args(argv)
    try:
        sweep_on_ray(args.spec, args.out, args.ray, jobs=args.jobs)
    except ValueError as err:
        print(f"dynosim: error: {err}", file=sys.stderr)
        return 2
    except RuntimeError as err:
        print(f"dynosim: error: {err}", file=sys.stderr)
        return 1
    # Every candidate is stored now: this prints the summary and writes nothing new.
    command = ["sweep", args.spec, "--out", args.out]
    if args.jobs is not None:
        command += ["--jobs", str(args.jobs)]
    return dynosim.main(command)


if __name__ == "__main__":
    raise SystemExit(_main())
