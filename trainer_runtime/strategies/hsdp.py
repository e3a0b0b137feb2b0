"""STRATEGY=hsdp: hybrid sharding, FSDP2 on a two-dimensional mesh (nodes x processes per node): the state is sharded
across the processes of a node and replicated across the nodes. A layer's all-gather and its gradients'
reduce-scatter stay inside the node (NVLink), and only the sharded gradients' all-reduce crosses the network, once
per step: for a model one node holds, the network carries 1/processes-per-node of what fsdp over every rank does.
Everything else (the units, mixed precision, sharded checkpoints, accumulation) is fsdp's; on one node it is fsdp."""

from __future__ import annotations

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from trainer_runtime.strategies.fsdp import FSDPStrategy

# the mesh's dimensions, outer first: the replicas (one per node), then the shards within a node
MESH_DIMENSIONS = ("replicate", "shard")


class HSDPStrategy(FSDPStrategy):
    name = "hsdp"

    def device_mesh(self, env, device) -> DeviceMesh:
        """The nodes, then each node's processes (torchrun gives every node as many): a shard group per node."""
        return init_device_mesh(device.type, (env.nodes, env.local_world_size), mesh_dim_names=MESH_DIMENSIONS)
