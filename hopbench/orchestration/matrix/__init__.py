"""`hopbench matrix`: every link of a cluster, measured pair by pair, placed by Ray.

One agent per node (a Ray actor pinned to its node with NodeAffinitySchedulingStrategy)
serves (a hopbench server on the node's address, in a thread) and runs (a hopbench client
session, whose files it hands back). The driver plans the pairs (ordered or unordered),
groups them into rounds of disjoint pairs (the circle method: no node is in two
measurements at once), runs each round with at most `concurrency` pairs at a time, and
writes every measurement as a sweep cell (cells/<pair>/<transport>/<payload>-g0/r<k>/), so
fit, verdict, export, plot and report read the folder unchanged. Each node's doctor
report is recorded with it; the outliers are named with their likely cause
(analysis: hopbench.analysis.matrix).

Resumable like a sweep: the same command with `--out FOLDER` measures only the cells not
yet complete. A node that leaves the cluster mid-run is recorded in matrix.left, its
remaining cells are marked failed, the rest continue.

Rooms: config.py, plan.py, run.py (the driver), agent.py (the node's actor), ray.py (RayAgents,
the only module that imports ray); the driver (run_matrix) takes
any `Agents` (tests use in-process fakes)."""

from __future__ import annotations

from hopbench.orchestration.matrix.agent import _Agent
from hopbench.orchestration.matrix.config import (
    Agents,
    MatrixConfig,
    NodeLeft,
    checked,
    command_line,
    find_resumable,
    open_folder,
    parse_interfaces,
    shape_fields,
)
from hopbench.orchestration.matrix.plan import Cell, pair_name, pairs, plan, rounds
from hopbench.orchestration.matrix.ray import RayAgents
from hopbench.orchestration.matrix.run import run_matrix

__all__ = ["Agents", "Cell", "MatrixConfig", "NodeLeft", "RayAgents", "_Agent", "checked", "command_line", "find_resumable",
           "open_folder", "pair_name", "pairs", "parse_interfaces", "plan", "rounds", "run_matrix", "shape_fields"]
