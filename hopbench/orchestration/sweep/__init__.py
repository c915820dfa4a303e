"""`hopbench sweep`: link rungs x transports x payloads (x think-time gaps), repeated R
times in an interleaved random order (recorded seed), so machine drift shows up as
spread across repeats, not as bias between cells.

Per rung: an emulated link (hopbench.orchestration.netem) or loopback or a real peer; one long-lived
`hopbench serve` in the server namespace and one agent (hopbench.orchestration.agent) in the client
namespace. Each cell is one session and one result folder under cells/; a cell whose
report says "complete" is never measured again, so re-running resumes.
"""

from __future__ import annotations

from hopbench.orchestration.sweep.run import SweepOptions, missing_requirements, run_sweep

__all__ = ["SweepOptions", "run_sweep", "missing_requirements"]
