"""Process groups a probe measures in (no torch): which ranks form each group of a scope.

Scopes (measured inside one launch with sub-groups): `intra`, the ranks of one node at world
sizes 2, 4, ... (every node at once); `inter`, one rank per node; `rails`, local rank r of
every node (every r at once); `global`, every rank; `device`, each rank alone.
"""

from __future__ import annotations

from dataclasses import dataclass

SCOPES = ("intra", "inter", "rails", "global")


@dataclass(frozen=True, kw_only=True)
class GroupSpec:
    """One scope at one world size: the concurrent process groups that measure it.

    `members` lists the ranks of each group; groups of one spec run at the same time (one per
    node for `intra`), so a slow node stands out. `names` label each group in the tables.
    """

    scope: str
    world_size: int
    num_nodes: int
    members: tuple[tuple[int, ...], ...]
    names: tuple[str, ...]
    # whether each group needs a process group of its own: a per-device probe's groups of
    # one rank do not (on 8,192 ranks, 8,192 new_group calls on every rank); DDP's single-rank
    # baseline does (its model syncs over it)
    communicator: bool = True


def intra_sizes(gpus_per_node: int, num_nodes: int) -> list[int]:
    """Intra-node world sizes 2, 4, 8, ... and G itself; on one node G is the global scope."""
    sizes = []
    size = 2
    while size < gpus_per_node:
        sizes.append(size)
        size *= 2
    if num_nodes > 1 and gpus_per_node > 1:
        sizes.append(gpus_per_node)
    return sizes


def scope_groups(num_nodes: int, gpus_per_node: int, scopes: tuple[str, ...]) -> list[GroupSpec]:
    """Every group spec a sweep measures, smallest scope first."""
    specs: list[GroupSpec] = []
    if "intra" in scopes:
        for size in intra_sizes(gpus_per_node, num_nodes):
            members = tuple(
                tuple(range(node * gpus_per_node, node * gpus_per_node + size))
                for node in range(num_nodes)
            )
            names = tuple(f"node{node}" for node in range(num_nodes))
            specs.append(
                GroupSpec(scope="intra", world_size=size, num_nodes=1, members=members, names=names)
            )
    if num_nodes > 1 and "inter" in scopes:
        # one rank per node, alone: the cleanest view of the network between nodes
        members = (tuple(node * gpus_per_node for node in range(num_nodes)),)
        specs.append(
            GroupSpec(
                scope="inter",
                world_size=num_nodes,
                num_nodes=num_nodes,
                members=members,
                names=("rail0",),
            )
        )
    if num_nodes > 1 and gpus_per_node > 1 and "rails" in scopes:
        # local rank r of every node, every r at once: a slow NIC (rail) stands out
        members = tuple(
            tuple(node * gpus_per_node + r for node in range(num_nodes))
            for r in range(gpus_per_node)
        )
        names = tuple(f"rail{r}" for r in range(gpus_per_node))
        specs.append(
            GroupSpec(
                scope="rails",
                world_size=num_nodes,
                num_nodes=num_nodes,
                members=members,
                names=names,
            )
        )
    if "global" in scopes:
        world = num_nodes * gpus_per_node
        specs.append(
            GroupSpec(
                scope="global",
                world_size=world,
                num_nodes=num_nodes,
                members=(tuple(range(world)),),
                names=("all",),
            )
        )
    return specs


# a per-device probe's two ways of running: "alone", one device per node at a time (every node
# at the same time: nodes share nothing a device probe measures), or "together", every device
# of every node at once (as a training job loads a node: power, clocks, the host's links shared)
CONCURRENCY = ("alone", "together")
DEVICE_SCOPE = {"alone": "device", "together": "node"}  # the scope label of each way
CONCURRENCY_OF = {scope: way for way, scope in DEVICE_SCOPE.items()}


def device_rounds(num_nodes: int, gpus_per_node: int, concurrency: str) -> list[GroupSpec]:
    """The rounds of single-rank groups a per-device probe measures in, one round after
    another: `alone`, local rank r of every node in round r (gpus_per_node rounds, whatever
    the node count); `together`, every rank in one round."""
    ranks = range(num_nodes * gpus_per_node)
    if concurrency == "together":
        rounds = [list(ranks)]
    elif concurrency == "alone":
        rounds = [[r for r in ranks if r % gpus_per_node == i] for i in range(gpus_per_node)]
    else:
        raise ValueError(f"concurrency must be one of {CONCURRENCY}, not {concurrency!r}")
    return [
        GroupSpec(
            scope=DEVICE_SCOPE[concurrency],
            world_size=1,
            num_nodes=1,
            members=tuple((r,) for r in members),
            names=tuple(f"rank{r}" for r in members),
            communicator=False,
        )
        for members in rounds
    ]
