"""CHECKPOINT_EVERY_SECONDS=auto's choice: the checkpoint interval that loses the least training.

A save costs the training C seconds; a fault loses the training since the last checkpoint, half an interval on
average. Young (1974) and Daly (2006): the interval τ = √(2 × C × M) makes the sum of the two smallest, M being the
mean time between the gang's faults.

M is estimated as a rate with a prior: one fault per NODE_MTBF_HOURS / nodes hours until this Job has run, then
(1 + the faults it has seen) over (that prior period + the time since its first step): a Job on flaky nodes
checkpoints more often after its first faults, a quiet one less often as it runs. The prior is Llama 3's
pre-training (Meta, 2024: 466 interruptions in 54 days on 16,384 GPUs, 2,048 nodes of 8: one every 2.8 hours, so
about 5,700 hours per node).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NODE_MTBF_HOURS = 5_700.0
FIRST_SECONDS = 300.0  # until a save has been measured
SHORTEST_SECONDS = 10.0


@dataclass(frozen=True)
class Chosen:
    seconds: float
    cost: float  # C
    between_faults: float  # M
    faults: int
    nodes: int
    write_seconds: float

    def line(self) -> str:
        seen = f"{self.faults} fault{'s' if self.faults != 1 else ''} seen" if self.faults else "no fault seen yet"
        bound = (f"; no shorter than a write ({self.write_seconds:.1f} s)"
                 if self.seconds == self.write_seconds else "")
        return (f"checkpoint interval (CHECKPOINT_EVERY_SECONDS=auto): {self.seconds:.0f} s = √(2 × {self.cost:.2f} s "
                f"a save costs the training × {self.between_faults / 3600:.1f} h between faults ({self.nodes} "
                f"node{'s' if self.nodes != 1 else ''}, {seen})){bound}")


def between_faults(nodes: int, faults: int = 0, elapsed: float = 0.0) -> float:
    """M in seconds: the prior's period for ``nodes`` plus ``elapsed`` seconds of this Job, over 1 + ``faults``."""
    prior = NODE_MTBF_HOURS * 3600 / max(1, nodes)
    return (prior + max(0.0, elapsed)) / (1 + max(0, faults))


def choose(cost: float, write_seconds: float, nodes: int, faults: int = 0, elapsed: float = 0.0) -> Chosen:
    """The interval for a save that cost the training ``cost`` seconds and whose write took ``write_seconds``."""
    mtbf = between_faults(nodes, faults, elapsed)
    young_daly = math.sqrt(2 * max(cost, 0.0) * mtbf)
    seconds = max(young_daly, write_seconds, SHORTEST_SECONDS)
    return Chosen(seconds, cost, mtbf, faults, nodes, write_seconds)
