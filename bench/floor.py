"""The floor of a distributed start: a process that only imports torch and joins a gloo group of the same size
(what any torchrun program pays before its first step), then prints ``ready`` from rank 0.

    torchrun --standalone --nproc-per-node 2 -m bench.floor
"""

import torch
import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("gloo")
    dist.barrier()
    if dist.get_rank() == 0:
        print(f"ready: torch {torch.__version__}, world size {dist.get_world_size()}", flush=True)
    dist.destroy_process_group()
