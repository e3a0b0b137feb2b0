"""Checkpoints on the shared volume, behind one manager (manager.py): written atomically, verified before
loading, the newest valid one resumed, the last few kept, and mirrored to a bucket (mirror.py, remote.py) when
checkpoint.storage_uri asks. Two formats, one module each: a single verified file (single_file.py) and a
directory of shards (sharded.py); their names, listing and pruning are shared (layout.py), the state they record
besides the tensors is state.py's schema.

Nothing is imported here: the torch-free modules (layout, state, remote, mirror) are read by the stager, which
must start without torch."""
