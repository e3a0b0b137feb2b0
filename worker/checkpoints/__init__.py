"""Checkpoints on the shared volume, behind one manager (manager.py): written atomically, verified before
loading, the newest valid one resumed, the last few kept. Two formats, one module each: a single verified file
(single_file.py) and a directory of shards (sharded.py); their names, listing and pruning are shared
(layout.py), the state they record besides the tensors is state.py's schema."""

from worker.checkpoints.found import Checkpoint
from worker.checkpoints.layout import CorruptCheckpoint, Position
from worker.checkpoints.manager import CheckpointManager, load_newest
from worker.checkpoints.state import TrainingState

__all__ = ["Checkpoint", "CheckpointManager", "CorruptCheckpoint", "Position", "TrainingState", "load_newest"]
