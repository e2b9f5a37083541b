"""The memory plan as the report's timeline: every intermediate tensor's lifetime (the nodes from the
one that writes it to the last that reads it) and its place in the arena (offset, bytes), the planned
peak against the sum of all tensors (one buffer each) and the largest live set (the lower bound)."""
from __future__ import annotations


def memory_view(memory_plan, graph) -> dict | None:
    """The timeline's data (JSON-ready), or None where the executor has no static plan (a symbolic
    dimension: the graph executor allocates per run)."""
    if memory_plan is None:
        return None
    names = [n.name for n in graph.nodes]
    tensors = []
    for v, a in memory_plan.allocations.items():
        first, last = memory_plan.lifetimes[v]
        tensors.append({"name": v.name, "first": first, "last": last, "offset": a.offset, "bytes": a.nbytes,
                        "storage": a.storage_id})
    tensors.sort(key=lambda t: (t["first"], t["offset"]))
    return {"tensors": tensors, "nodes": names, "arena_bytes": memory_plan.arena_bytes,
            "naive_bytes": memory_plan.naive_bytes, "live_bytes": memory_plan.live_bytes,
            "storages": memory_plan.num_storages, "strategy": memory_plan.strategy,
            "alignment": memory_plan.alignment, "input_bytes": memory_plan.input_bytes,
            "output_bytes": memory_plan.output_bytes, "constant_bytes": memory_plan.constant_bytes}


__all__ = ["memory_view"]
