"""Checkpoints on the shared volume, behind one manager (manager.py): written atomically, verified before
loading, the newest valid one resumed, the last few kept, and mirrored to a bucket (trainer_stager's
checkpoint_mirror and checkpoint_bucket) when checkpoint.storage_uri asks. Two formats, one module each: a single
verified file (single_file.py) and a directory of shards (sharded.py); their names, listing and pruning are the
contract's (trainer_contract.checkpoint_layout), the state they record besides the tensors is state.py's schema.

Nothing is imported here."""
