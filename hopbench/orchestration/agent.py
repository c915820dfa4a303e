"""A client worker for sweeps: runs inside a rung's client namespace, reads one cell (or a
list of payloads, measured in one session) per line of JSON on stdin, measures it with
run_session, answers one JSON line on stdout. Long-lived, so a sweep pays Python's
start-up (and UCX's) once per rung, not per cell."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any, Callable

from hopbench.errors import HopbenchError
from hopbench.orchestration.runner import RunIdentity, run_session
from hopbench.records import Payload, RunConfig


def answered(work: Callable[[], object]) -> dict[str, Any]:
    """An agent's answer to one job: {"ok": True} once `work` ran, else the error's one line (a
    bug's repr marked as such: reported, and the sweep or matrix goes on)."""
    try:
        work()
        return {"ok": True}
    except HopbenchError as exc:
        return {"ok": False, "error": str(exc)}
    except Exception as exc:  # a bug: report it, keep the sweep going
        return {"ok": False, "error": f"internal error: {exc!r}"}


def _measure(job: dict[str, Any]) -> None:
    folder = Path(job["folder"])
    folder.mkdir(parents=True)
    loads = [Payload(**p) for p in job.get("payloads") or [job["payload"]]]  # several: one session, in order
    cfg = RunConfig.from_dict(job["config"])
    if cfg.clients > 1:  # M target processes at once; the sweep's M = 1 cells are the reference
        from hopbench.orchestration.clients import ClientsOptions, run_clients

        record = run_clients(job["host"], job["port"], loads, cfg, functools.partial(Path, folder), cpu=cfg.cpu,
                             options=ClientsOptions(reference=False, extra=job.get("extra"),
                                                    warn=lambda text: print(f"warning: {text}"),
                                                    say=lambda text: None))
        if record["errors"]:
            raise HopbenchError("; ".join(f"target {t}: {e}" for t, e in record["errors"].items()))
    else:
        run_session(job["host"], job["port"], loads, cfg, folder=folder, identity=RunIdentity(extra=job.get("extra")))


def main() -> None:
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but answers on the real stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        out.write(json.dumps(answered(functools.partial(_measure, job))) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
