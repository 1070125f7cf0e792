"""Placement: which physical GPUs each parallel group occupies, and which links its traffic crosses.

Rank r runs on GPU r, so the rank order is the placement: "tp-cp-dp-pp" puts rank tp_i + TP*(cp_i + CP*(dp_i +
DP*pp_i)), "tp-cp-pp-dp" swaps DP and PP. A group of one kind is `size` ranks `stride` apart; EP is `ep`
consecutive ranks of one pipeline stage (Megatron-Core's expert layout with expert tensor parallelism 1: the expert
groups fold over the TP, CP and DP ranks, innermost first). All groups of a kind run their collective at the same
time, and that is the contention counted here.

Symmetry keeps the cost flat in the cluster size: every group of a kind is a translate of the one that holds
rank 0, so we route one representative edge (the one crossing the highest level) on a window graph of two nodes
and the switches above them, and count the sharing analytically: groups of a kind that cross the egress of a
unit = GPUs in the unit / members of one group in it (twice that for the worst unit when units and groups do
not align). A ring needs one ring's worth of bandwidth through every unit it leaves (NCCL spreads its channels
over the unit's NICs), so its scale-out bus bandwidth is the smallest (unit egress / groups sharing it) over the
levels it crosses, times the fabric's ring efficiency (collectives.py).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache

import networkx as nx
import numpy as np

from .collectives import net_efficiency, nvlink_ring_busbw
from .spec import RANK_ORDERS, ClusterSpec
from .topology import (SCALE_OUT_SWITCH_KINDS, build_graph, domain_gpus, levels, nic_gbytes_per_gpu, torus_coords,
                       torus_dims, torus_link_gbytes_per_s, torus_route)

KINDS = ("tp", "cp", "dp", "pp", "ep")
LINK_ORDER = ("nvlink", "nic", "leaf_uplink", "local", "pod_uplink", "global", "torus")
FABRIC_NAMES = {"infiniband": "InfiniBand", "roce": "RoCE", "ethernet": "Ethernet", "efa": "EFA"}
LEVEL_NAMES = {"nic": "NICs", "leaf_uplink": "leaf uplinks", "pod_uplink": "pod uplinks", "local": "local links",
               "global": "global links", "torus": "torus links"}
# Ring edges of one torus group costed exactly up to this many; beyond, the mean over this many consecutive
# edges (the coordinate carry pattern repeats every X*Y nodes, far fewer).
TORUS_SAMPLE_EDGES = 65_536


class PlacementRejected(Exception):
    """The layout cannot be placed on this cluster; `reason` is a machine key, `message` a readable sentence."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class GroupPlacement:
    kind: str                 # "tp" | "cp" | "dp" | "pp" | "ep"
    size: int                 # ranks in one group (for "pp": the number of stages; p2p is between neighbours)
    stride: int               # rank distance between consecutive members
    per_domain: int           # members in each NVLink domain it touches
    domains: int              # NVLink domains spanned
    nodes: int                # nodes spanned
    fabric: str               # "nvlink" if inside one domain, else the scale-out kind ("infiniband", ...)
    links: tuple[str, ...]    # link levels its traffic crosses, e.g. ("nvlink", "nic", "leaf_uplink")
    shared_by: dict[str, int]  # scale-out link level -> groups of this kind sharing one unit's egress at once
    nvlink_busbw_gbytes_per_s: float    # achievable ring bus bandwidth inside the domain (0 if one member/domain)
    scaleout_busbw_gbytes_per_s: float  # achievable bus bandwidth of its inter-domain part after contention
    hops: int                 # switch hops on its longest path (NVSwitch: 1; torus: routers on the route)
    members_per_unit: dict[str, int]         # scale-out level -> members of one group in one unit of it
    egress_gbytes_per_s: dict[str, float]    # scale-out level -> unit egress (line rate) / shared_by
    bottleneck: str           # link level that bounds its bandwidth
    # Members in the fullest NVLink domain it touches, and whether every domain it touches holds that many
    # (per_domain is their mean, rounded up: what the costs use; these are for the description).
    most_per_domain: int
    even_per_domain: bool

    def as_dict(self) -> dict:
        out = asdict(self)
        out["links"] = list(self.links)
        return out


@dataclass(frozen=True)
class Placement:
    rank_order: str
    groups: dict[str, GroupPlacement]
    tp_inside_nvlink_domain: bool
    topology: str = ""
    domains_span_nodes: bool = False  # NVLink domains of several nodes (GB200 NVL72's 18 trays)

    def describe(self) -> str:
        """One line a planner reads, e.g. "TP 8 inside each NVLink domain, DP 8 across 8 nodes over
        InfiniBand (rail-aligned), PP 16 across 16 nodes over InfiniBand"."""
        parts = [_describe(g, self.topology, self.domains_span_nodes) for g in self.groups.values() if g.size > 1]
        return ", ".join(parts) or "one GPU: no parallel groups"

    def as_dict(self) -> dict:
        return {"rank_order": self.rank_order.split("-"), "rank_order_name": self.rank_order,
                "tp_groups_inside_nvlink_domain": self.tp_inside_nvlink_domain,
                "description": self.describe(),
                "groups": {kind: g.as_dict() for kind, g in self.groups.items()}}


def _describe(g: GroupPlacement, topology: str, domains_span_nodes: bool = False) -> str:
    name = f"{g.kind.upper()} {g.size}"
    if g.domains == 1:
        return f"{name} inside each NVLink domain" + (f" (across {g.nodes} nodes)" if g.nodes > 1 else "")
    # Where a domain is a node, nodes are what a planner counts; where it spans several (a rack of trays), the
    # domains are ("PP 9 across 9 nodes" was nine NVL72 racks).
    where = (f"across {g.nodes} nodes" if g.nodes == g.domains and not domains_span_nodes
             else f"across {g.domains} NVLink domains")
    most = g.most_per_domain
    notes = [f"{'' if g.even_per_domain else 'up to '}{most} per NVLink domain"] if most > 1 else []
    if g.bottleneck in LEVEL_NAMES and g.bottleneck != "nic":
        notes.append(f"{LEVEL_NAMES[g.bottleneck]} shared {g.shared_by[g.bottleneck]}-way")
    elif topology == "rail_optimized" and "leaf_uplink" not in g.links:
        notes.append("rail-aligned")
    note = f" ({', '.join(notes)})" if notes else ""
    return f"{name} {where} over {FABRIC_NAMES.get(g.fabric, g.fabric)}{note}"


# --------------------------------------------------------------------------------------------------------
# Ranks to groups


def rank_strides(tp: int, cp: int, dp: int, pp: int, ep: int, rank_order: str) -> dict[str, tuple[int, int]]:
    """kind -> (stride, size) for the rank order (innermost first)."""
    if rank_order not in RANK_ORDERS:
        raise ValueError(f"unknown rank order {rank_order!r} (known: {', '.join(RANK_ORDERS)})")
    inner = tp * cp
    if rank_order == "tp-cp-dp-pp":
        dp_stride, pp_stride = inner, inner * dp
    else:
        dp_stride, pp_stride = inner * pp, inner
    return {"tp": (1, tp), "cp": (tp, cp), "dp": (dp_stride, dp), "pp": (pp_stride, pp), "ep": (1, ep)}


def ep_across_stages(tp: int, cp: int, pp: int, ep: int, rank_order: str) -> str | None:
    """Why an expert group cannot be placed in this rank order, or None: EP wider than a TP·CP block folds over
    data-parallel ranks, which the order "tp-cp-pp-dp" interleaves with pipeline stages."""
    if ep > tp * cp and pp > 1 and rank_order != "tp-cp-dp-pp":
        return (f"EP={ep} spans data-parallel ranks, which rank order {rank_order} interleaves with pipeline stages: "
                f"expert groups need DP inside a stage (tp-cp-dp-pp)")
    return None


def _check(cluster: ClusterSpec, tp: int, cp: int, dp: int, pp: int, ep: int, rank_order: str) -> None:
    """Caller errors raise ValueError; layouts this cluster cannot hold raise PlacementRejected."""
    degrees = {"tp": tp, "cp": cp, "dp": dp, "pp": pp, "ep": ep}
    for name, value in degrees.items():
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer (got {value!r})")
    if tp * cp * dp * pp != cluster.num_gpus:
        raise ValueError(f"tp*cp*dp*pp = {tp * cp * dp * pp} must equal num_gpus ({cluster.num_gpus})")
    if (tp * cp * dp) % ep:
        raise PlacementRejected("ep_not_dividing_ranks", f"EP={ep} does not divide TP·CP·DP={tp * cp * dp}")
    if (why := ep_across_stages(tp, cp, pp, ep, rank_order)) is not None:
        raise PlacementRejected("ep_across_pipeline_stages", why)
    if (why := tp_domain_reason(cluster, tp)) is not None:
        raise PlacementRejected("tp_crosses_nvlink_domain", why)


def tp_domain_reason(cluster: ClusterSpec, tp: int) -> str | None:
    """Why TP groups of `tp` GPUs cannot each stay inside one NVLink domain, or None where they can."""
    dom = domain_gpus(cluster)
    if tp > dom:
        return f"TP={tp} crosses the {dom}-GPU NVLink domain"
    if dom % tp:
        return f"TP={tp} does not divide the {dom}-GPU NVLink domain, so some TP groups cross it"
    return None


def place(cluster: ClusterSpec, tp: int, cp: int, dp: int, pp: int, ep: int, rank_order: str,
          shaped: dict[tuple[str, int, int], GroupPlacement] | None = None) -> Placement:
    """Place a layout; raises PlacementRejected (reason, message) when the cluster cannot hold it. `shaped`:
    groups already placed on this same cluster by (kind, stride, size), reused and extended (a search places
    thousands of layouts that share most of their groups)."""
    strides = rank_strides(tp, cp, dp, pp, ep, rank_order)
    _check(cluster, tp, cp, dp, pp, ep, rank_order)
    shaped = {} if shaped is None else shaped
    groups = {}
    for kind in KINDS:
        key = (kind, *strides[kind])
        if key not in shaped:
            shaped[key] = _group(cluster, *key)
        groups[kind] = shaped[key]
    return Placement(rank_order, groups, True, cluster.fabric.topology,
                     cluster.node.nvlink_domain_gpus > cluster.node.gpus)


def _group(cluster: ClusterSpec, kind: str, stride: int, size: int) -> GroupPlacement:
    s = _shape(cluster, int(stride), int(size), kind != "pp")
    return GroupPlacement(kind, int(size), int(stride), s.per_domain, s.domains, s.nodes, s.fabric, s.links,
                          dict(s.shared_by), s.nvlink_busbw, s.scaleout_busbw, s.hops, dict(s.members),
                          dict(s.egress), s.bottleneck, s.most_per_domain, s.even_per_domain)


@dataclass(frozen=True)
class _Shape:
    """What a group's (stride, size) gives on one cluster; cached, so immutable (tuples, not dicts)."""

    per_domain: int
    domains: int
    nodes: int
    fabric: str
    links: tuple[str, ...]
    shared_by: tuple[tuple[str, int], ...]
    members: tuple[tuple[str, int], ...]
    egress: tuple[tuple[str, float], ...]
    nvlink_busbw: float
    scaleout_busbw: float
    hops: int
    bottleneck: str
    most_per_domain: int
    even_per_domain: bool


def _worst_start(stride: int, size: int, unit: int, total: int) -> int:
    """First GPU of the group that spans the most units of `unit` GPUs: groups start at multiples j of the
    block (stride * size GPUs of interleaved groups) plus a lane < stride, and the one that starts furthest
    into a unit spans the most. Block starts fall on multiples of gcd(block, unit) within a unit."""
    block = stride * size
    step = math.gcd(block, unit)
    period = unit // step
    blocks = max(1, total // block)
    if blocks >= period:  # every offset occurs: solve j * block = unit - step (mod unit)
        j = (period - 1) * pow(block // step, -1, period) % period if period > 1 else 0
    else:
        j = max(range(blocks), key=lambda i: i * block % unit)
    start = j * block
    return start + min(stride - 1, unit - 1 - start % unit)


def _spread(stride: int, size: int, unit: int, total: int) -> tuple[int, int]:
    """(members per unit, units spanned) of the group that spans the most units: `size` members `stride` GPUs
    apart, units of `unit` GPUs, `total` GPUs."""
    if stride >= unit:
        return 1, size
    offset = _worst_start(stride, size, unit, total) % unit
    units = min(size, (offset + (size - 1) * stride) // unit + 1)
    return -(-size // units), units


def _domain_spread(stride: int, size: int, unit: int, total: int) -> tuple[int, int, int, bool]:
    """_spread's (members per unit, units spanned) of the group that spans the most units, counted member by
    member, with the members in its fullest unit and whether every unit it touches holds as many: 64 DP ranks 8
    GPUs apart on 72-GPU NVLink domains span 8 and hold 9, 9, ... 9 and 1 (8 per unit, the mean rounded up)."""
    start = _worst_start(stride, size, unit, total) if stride < unit else 0
    counts = np.bincount((start + stride * np.arange(size, dtype=np.int64)) // unit)
    counts = counts[counts > 0]
    return -(-size // len(counts)), len(counts), int(counts.max()), bool(counts.min() == counts.max())


def _crossing(unit: int, stride: int, size: int, total: int) -> tuple[bool, int, int]:
    """Whether groups leave units of `unit` GPUs, how many groups share one unit's egress, and one group's
    members in a unit. When blocks (stride * size GPUs of interleaved groups) tile the units, a unit holds
    members of min(unit, stride) groups and all of them leave it. When a block boundary can fall inside a
    unit, up to twice that: an upper bound (exact counting would look at every unit), never above the number
    of groups."""
    members, units = _spread(stride, size, unit, total)
    if units == 1:
        return False, 0, size
    aligned = stride * size % unit == 0
    return True, min(unit, stride if aligned else 2 * stride, total // size), members


@lru_cache(maxsize=8192)
def _shape(cluster: ClusterSpec, stride: int, size: int, closed: bool) -> _Shape:
    """Links, sharing and bandwidth of the groups of one (stride, size); `closed`: a ring (False: a chain of
    point-to-point neighbours, the pipeline)."""
    dom = domain_gpus(cluster)
    per_domain, domains, *held = _domain_spread(stride, size, dom, cluster.num_gpus)
    nodes = _spread(stride, size, min(cluster.node.gpus, cluster.num_gpus), cluster.num_gpus)[1]
    nvlink = nvlink_ring_busbw(cluster) if per_domain > 1 else 0.0
    if size == 1 or domains == 1:
        links = ("nvlink",) if size > 1 else ()
        return _Shape(per_domain, 1, nodes, "nvlink", links, (), (), (), nvlink, 0.0, 1 if size > 1 else 0,
                      "nvlink" if size > 1 else "none", *held)
    if cluster.fabric.topology == "torus":
        crossed, pair = _torus_load(cluster, stride, size, closed)
    else:
        crossed, pair = _tree_load(cluster, stride, size)
    path_levels, hops = _route(cluster, *pair)
    names = {lv for lv, _, _, _ in crossed} | set(path_levels) | ({"nvlink"} if per_domain > 1 else set())
    egress = {lv: eg for lv, _, _, eg in crossed}
    limit = min(egress, key=egress.get)
    scaleout = net_efficiency(cluster.fabric.kind) * egress[limit]
    bottleneck = "nvlink" if 0 < nvlink < scaleout else limit
    return _Shape(per_domain, domains, nodes, cluster.fabric.kind, tuple(x for x in LINK_ORDER if x in names),
                  tuple((lv, sh) for lv, sh, _, _ in crossed), tuple((lv, m) for lv, _, m, _ in crossed),
                  tuple(egress.items()), nvlink, scaleout, hops, bottleneck, *held)


def _tree_load(cluster: ClusterSpec, stride: int, size: int) -> tuple[list, tuple[int, int]]:
    """Fat tree, rail-optimized and dragonfly: (level, shared, members, egress share) for each level the
    groups cross, and a representative edge (GPU a, GPU b) crossing the highest one."""
    crossed = []
    for lv in levels(cluster):
        cross, shared, members = _crossing(lv.unit_gpus, stride, size, cluster.num_gpus)
        if not cross:
            break  # levels nest: a group inside one unit is inside the units above it too
        egress = lv.egress_gbytes_per_s / shared
        if lv.name == "nic":  # and no more than its own members' NICs (NCCL uses the NICs near its GPUs)
            egress = min(egress, members * nic_gbytes_per_gpu(cluster))
        crossed.append((lv.name, shared, members, egress))
    top = next(lv for lv in levels(cluster) if lv.name == crossed[-1][0]).unit_gpus
    return crossed, _edge_across(top, stride, size)


def _edge_across(unit: int, stride: int, size: int) -> tuple[int, int]:
    """A ring edge (GPU a, GPU a + stride) of some group with a < unit <= a + stride: it leaves the first unit."""
    if stride >= unit:
        return 0, stride
    into_block = unit % (stride * size)  # both ends must lie in one block of interleaved groups
    a = unit - stride if into_block >= stride else unit - into_block
    return a, a + stride


@lru_cache(maxsize=4096)
def _route(cluster: ClusterSpec, a: int, b: int) -> tuple[tuple[str, ...], int]:
    """Link levels on the cheapest path from GPU a to GPU b, and the switches on it, from a window graph of
    their two nodes (and, on a torus, the nodes between them)."""
    g = cluster.node.gpus
    if cluster.fabric.topology == "torus":
        dims = torus_dims(max(1, math.ceil(cluster.num_gpus / g)))
        window = torus_route(a // g, b // g, dims)
    else:
        window = [a // g, b // g]
    graph = build_graph(cluster, window)
    path = nx.shortest_path(graph, f"gpu:{a}", f"gpu:{b}", weight="cost")
    edge_levels = {graph.edges[u, v]["level"] for u, v in zip(path, path[1:], strict=False)} - {"pcie"}
    switches = sum(1 for v in path if graph.nodes[v]["kind"] in SCALE_OUT_SWITCH_KINDS)
    return tuple(x for x in LINK_ORDER if x in edge_levels), max(1, switches)


def _torus_load(cluster: ClusterSpec, stride: int, size: int, closed: bool) -> tuple[list, tuple[int, int]]:
    """3D torus: taking every group of a kind as a translate of the one that spans the most domains, the ring
    traffic on the links of one dimension, in rings per link, is (groups) x (their hops along it) / (links)
    = G x H_d / n, with G GPUs per node, H_d that group's ring hops along d and n its size. Counter-rotating
    rings use both directions of a link. An average: hot spots (e.g. at domain boundaries) are not modelled."""
    hops, pair = _torus_ring_hops(cluster, stride, size, closed)
    load = max(cluster.node.gpus * h / size for h in hops)
    if load <= 0:
        # The group's NVLink domains share one node (two 4-GPU domains of an 8-GPU H200 NVL server): its traffic
        # between them leaves each domain through the domain's NICs and turns in the node's own router, on no
        # torus link, so those NICs are the limit, as the "nic" level of a tree (_tree_load).
        dom = domain_gpus(cluster)
        _, shared, members = _crossing(dom, stride, size, cluster.num_gpus)
        egress = min(dom * nic_gbytes_per_gpu(cluster) / max(1, shared), members * nic_gbytes_per_gpu(cluster))
        return [("nic", max(1, shared), members, egress)], pair
    egress = 2 * torus_link_gbytes_per_s(cluster) / load
    members = _spread(stride, size, domain_gpus(cluster), cluster.num_gpus)[0]
    return [("torus", max(1, math.ceil(load - 1e-9)), members, egress)], pair


@lru_cache(maxsize=1024)
def _torus_ring_hops(cluster: ClusterSpec, stride: int, size: int, closed: bool
                     ) -> tuple[tuple[float, float, float], tuple[int, int]]:
    """Hops of one group's ring along x, y, z (the group spanning the most NVLink domains; only edges between
    domains use the torus), and its longest such edge as a GPU pair."""
    g, dom = cluster.node.gpus, domain_gpus(cluster)
    dims = torus_dims(max(1, math.ceil(cluster.num_gpus / g)))
    count = min(size, TORUS_SAMPLE_EDGES)
    start = _worst_start(stride, size, dom, cluster.num_gpus) if stride < dom else 0
    gpus = start + np.arange(count, dtype=np.int64) * stride
    a, b = gpus[:-1], gpus[1:]
    if closed and count == size:
        a, b = np.append(a, gpus[-1]), np.append(b, gpus[0])
    keep = a // dom != b // dom
    a, b = a[keep], b[keep]
    ca, cb = np.array(torus_coords(a // g, dims)), np.array(torus_coords(b // g, dims))
    size_d = np.array(dims)[:, None]
    d = np.abs(ca - cb) % size_d
    dist = np.minimum(d, size_d - d)
    scale = (size - 1 + closed) / (count - 1) if count < size else 1.0  # sampled: scale to all edges
    worst = int(np.argmax(dist.sum(axis=0)))
    hops = tuple(float(h) * scale for h in dist.sum(axis=1))
    return hops, (int(a[worst]), int(b[worst]))


# --------------------------------------------------------------------------------------------------------
# The placement map for the web page


def placement_map(cluster: ClusterSpec, tp: int, cp: int, dp: int, pp: int, ep: int, rank_order: str,
                  limit_gpus: int = 256) -> dict:
    """Physical GPUs by node with their rank coordinates, for the page's map (domains outlined, coloured by
    pipeline stage). Shows whole nodes (whole NVLink domains where a domain spans nodes): the first of up to four
    pipeline stages, then the following ones, at most `limit_gpus` GPUs.

    Each cell: gpu (physical id), node, domain (NVLink domain index), rank (global rank), and the rank's
    coordinates: tp and cp are its index inside its TP and CP group, dp the data-parallel replica it belongs to,
    pp its pipeline stage, ep its index inside its expert-parallel group (0 for dense models)."""
    strides = rank_strides(tp, cp, dp, pp, ep, rank_order)
    if tp * cp * dp * pp != cluster.num_gpus:
        raise ValueError(f"tp*cp*dp*pp = {tp * cp * dp * pp} must equal num_gpus ({cluster.num_gpus})")
    g, n = cluster.node.gpus, cluster.num_gpus
    dom = domain_gpus(cluster)
    # Whole NVLink domains where one spans several nodes and fits the limit (a GB200 NVL72 rack of 18 trays), so
    # that the outline of each domain shown is the whole domain; whole nodes otherwise.
    unit = dom if g < dom <= limit_gpus else g
    shown = range(n) if n <= limit_gpus else _shown_gpus(n, unit, strides["pp"][0], pp, limit_gpus)
    cells = [_cell(gpu, g, dom, tp, cp, dp, pp, ep, rank_order) for gpu in shown]
    return {"gpus_total": n, "gpus_shown": len(cells), "gpus_per_node": g, "nvlink_domain_gpus": dom,
            "rank_order": rank_order, "cells": cells}


def _shown_gpus(n: int, g: int, pp_stride: int, pp: int, limit: int) -> list[int]:
    """The GPUs of whole units of g GPUs (nodes or NVLink domains), at most `limit` GPUs: the first units of up to
    four pipeline stages (the unit holding each stage's first GPU onwards), then the following units."""
    budget = max(1, limit // g)
    stages = min(pp, 4)
    per_stage = max(1, budget // stages)
    chosen: set[int] = set()
    for s in range(stages):
        first = s * pp_stride // g
        chosen.update(range(first, first + per_stage))
    total_nodes = math.ceil(n / g)
    extra = (x for x in range(total_nodes) if x not in chosen)
    chosen = {x for x in chosen if x < total_nodes}
    while len(chosen) < min(budget, total_nodes):
        chosen.add(next(extra))
    nodes = sorted(chosen)[:budget]
    return [gpu for node in nodes for gpu in range(node * g, min(n, (node + 1) * g))]


def _cell(gpu: int, g: int, dom: int, tp: int, cp: int, dp: int, pp: int, ep: int, order: str) -> dict:
    r = gpu
    rest = r // (tp * cp)
    dp_i, pp_i = (rest % dp, rest // dp) if order == "tp-cp-dp-pp" else (rest // pp, rest % pp)
    return {"gpu": gpu, "node": gpu // g, "domain": gpu // dom, "rank": r, "tp": r % tp, "cp": r // tp % cp,
            "dp": dp_i, "pp": pp_i, "ep": (r % (tp * cp) + tp * cp * dp_i) % ep}
