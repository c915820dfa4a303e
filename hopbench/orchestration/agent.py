"""A client worker for sweeps: runs inside a rung's client namespace, reads one cell per
line of JSON on stdin, measures it with run_session, answers one JSON line on stdout.
Long-lived, so a sweep pays Python's start-up (and UCX's) once per rung, not per cell."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hopbench.errors import HopbenchError
from hopbench.orchestration.runner import Payload, run_session


def main() -> None:
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but answers on the real stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        try:
            folder = Path(job["folder"])
            folder.mkdir(parents=True)
            run_session(job["host"], job["port"], [Payload(**job["payload"])], folder=folder,
                        transport=job["transport"], k=job["k"], id_bytes=job["id_bytes"], cycles=job["cycles"],
                        warmup=job["warmup"], gap_ms=job["gap_ms"], timeout_s=job.get("timeout_s", 10.0),
                        poll=job.get("poll", "auto"),
                        transport_settings=job.get("transport_settings") or {}, config=job.get("config"),
                        extra=job.get("extra"))
            answer = {"ok": True}
        except HopbenchError as exc:
            answer = {"ok": False, "error": str(exc)}
        except Exception as exc:  # a bug: report it, keep the sweep going
            answer = {"ok": False, "error": f"internal error: {exc!r}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
