"""The cluster as a graph: GPUs, NVLink domains, NICs per rail, and the switches of the scale-out fabric.

Two views of one fabric, kept consistent by tests (tests/engine/test_topology.py):
- `levels(cluster)`: the scale-out hierarchy as nested units (NVLink domain, leaf or scalable unit, pod,
  dragonfly group), each with the one-direction capacity leaving one unit. Placement counts sharing on these
  analytically, so its cost does not grow with the cluster.
- `build_graph(cluster, nodes)`: a networkx graph of some physical nodes and the switches above them (a bounded
  window), with one-direction capacities on the edges; placement routes a representative edge on it.

Physical layout (the rest of the engine relies on it): GPU ids 0..N-1; node n holds GPUs [n*G, (n+1)*G);
NVLink domain d holds GPUs [d*D, (d+1)*D), where D may be a multiple of G (GB200 NVL72: 18 trays of 4) or
divide it. Switch layers above the leaves are aggregated: one "spine" node stands for a pod's spine layer and
one leaf-spine edge for a leaf's whole uplink trunk (its capacity is the sum of the uplinks); the same for the
pod-core trunk. Edges are undirected; `capacity_gbytes_per_s` is each direction's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

import networkx as nx

from .spec import ClusterSpec

# A whole-cluster graph is for inspection and tests only; placement works on windows of two or three nodes.
MAX_GRAPH_NODES = 2048
SCALE_OUT_SWITCH_KINDS = ("leaf", "spine", "core", "router")  # the NVSwitch is scale-up
# Routing preference (networkx `weight`): NCCL keeps traffic on NVLink and on its rail (PXN) before it climbs
# to the spines, so a hop up the tree costs more than a detour through the NVSwitch.
LEVEL_COST = {"nvlink": 0.1, "pcie": 0.1, "nic": 1.0, "local": 2.0, "torus": 1.0,
              "leaf_uplink": 3.0, "pod_uplink": 5.0, "global": 5.0}


@dataclass(frozen=True)
class Level:
    """One scale-out level: traffic that leaves a unit of `unit_gpus` GPUs crosses it."""

    name: str                    # link level: "nic", "leaf_uplink", "pod_uplink", "local", "global", "torus"
    unit_gpus: int               # GPUs under one unit: NVLink domain, leaf / scalable unit, pod, dragonfly group
    egress_gbytes_per_s: float   # one-direction line-rate capacity out of one unit at this level (GB/s)


# --------------------------------------------------------------------------------------------------------
# Bandwidths and sizes


def domain_gpus(cluster: ClusterSpec) -> int:
    """GPUs of one NVLink domain as present in the cluster (a cluster may be a slice of one NVL72 rack)."""
    return min(cluster.node.nvlink_domain_gpus or cluster.node.gpus, cluster.num_gpus)


def nvlink_gbytes_per_s(cluster: ClusterSpec) -> float:
    """One direction of one GPU's NVLink (GB/s): vendors quote both directions (H100 900 -> 450)."""
    return cluster.node.nvlink_gbytes_per_s / 2


def port_gbytes_per_s(cluster: ClusterSpec) -> float:
    """One NIC port (GB/s) = Gb/s / 8; the fabric's port speed caps the NIC's (a 400G NIC on HDR runs at 200)."""
    gbits = cluster.node.nic_gbits_per_s
    if cluster.fabric.link_gbits_per_s:
        gbits = min(gbits, cluster.fabric.link_gbits_per_s)
    return gbits / 8


def nic_gbytes_per_gpu(cluster: ClusterSpec) -> float:
    """Scale-out bandwidth per GPU (GB/s, one direction): the node's ports shared by its GPUs."""
    return cluster.node.nics * port_gbytes_per_s(cluster) / cluster.node.gpus


def _whole(gpus: int, inner: int) -> int:
    """Round a unit down to whole inner units (at least one), so that the levels nest."""
    return max(inner, gpus // inner * inner)


@lru_cache(maxsize=256)
def levels(cluster: ClusterSpec) -> tuple[Level, ...]:
    """The scale-out levels of `cluster`, innermost first; only those with more than one unit in the cluster."""
    f, g = cluster.fabric, cluster.node.gpus
    dom = domain_gpus(cluster)
    per_gpu = nic_gbytes_per_gpu(cluster)
    if f.topology == "torus":
        # Capacity per link comes from torus_link_gbytes_per_s; placement counts ring hops per link.
        out = [Level("torus", dom, dom * per_gpu)]
    else:
        out = [Level("nic", dom, dom * per_gpu)]
        builder = _dragonfly_levels if f.topology == "dragonfly" else _tree_levels
        out += builder(cluster, dom, per_gpu, g)
    return tuple(lv for lv in out if lv.unit_gpus < cluster.num_gpus)


def _tree_levels(cluster: ClusterSpec, dom: int, per_gpu: float, g: int) -> list[Level]:
    """Fat tree and rail-optimized: leaf (or scalable unit), then pods."""
    f, nics = cluster.fabric, max(1, cluster.node.nics)
    r = f.oversubscription
    down = max(1, int(f.switch_radix * r / (1 + r)))  # leaf ports facing nodes: radix/2 at 1:1, radix*r/(1+r)
    if f.topology == "rail_optimized":
        # NIC i of every node of a scalable unit sits on rail leaf i: one downlink per node on each rail leaf.
        leaf = _whole(down * g, dom)
    else:
        leaf = _whole(max(1, down // nics) * g, dom)
    out = [Level("leaf_uplink", leaf, leaf * per_gpu / r)]
    if f.pod_gpus:
        pod, pod_r = _whole(f.pod_gpus, leaf), f.pod_oversubscription
    else:
        # A two-level Clos of radix-k switches reaches k leaves of `down` ports; above that a core layer
        # joins such pods at full bandwidth.
        pod, pod_r = _whole(f.switch_radix * down // nics * g, leaf), 1.0
    out.append(Level("pod_uplink", pod, pod * per_gpu / (r * pod_r)))  # tapers compound: leaf, then pod
    return out


def _dragonfly_levels(cluster: ClusterSpec, dom: int, per_gpu: float, g: int) -> list[Level]:
    """Dragonfly (Kim et al. 2008, balanced: p = h = k/4 terminals and global ports, a = k/2 routers per
    group): full bandwidth between a group's routers, global links tapered by `oversubscription`."""
    f, nics = cluster.fabric, max(1, cluster.node.nics)
    terminals = max(1, f.switch_radix // 4)
    router = _whole(max(1, terminals // nics) * g, dom)
    default_group = (f.switch_radix // 2) * terminals // nics * g
    group = _whole(f.group_gpus or default_group, router)
    return [Level("local", router, router * per_gpu),
            Level("global", group, group * per_gpu / f.oversubscription)]


def level(cluster: ClusterSpec, name: str) -> Level | None:
    return next((lv for lv in levels(cluster) if lv.name == name), None)


# --------------------------------------------------------------------------------------------------------
# 3D torus


@lru_cache(maxsize=64)
def torus_dims(num_nodes: int) -> tuple[int, int, int]:
    """Near-cubic (X <= Y <= Z) with X*Y*Z = num_nodes, minimising Z - X; x varies fastest with the node id."""
    best = (1, 1, num_nodes)
    for x in range(1, round(num_nodes ** (1 / 3)) + 2):
        if num_nodes % x:
            continue
        rest = num_nodes // x
        for y in range(x, math.isqrt(rest) + 1):
            if rest % y == 0 and rest // y - x < best[2] - best[0]:
                best = (x, y, rest // y)
    return best


def torus_coords(node: int, dims: tuple[int, int, int]) -> tuple[int, int, int]:
    x, y, _ = dims
    return node % x, node // x % y, node // (x * y)


def torus_offsets(a: int, b: int, dims: tuple[int, int, int]) -> tuple[int, int, int]:
    """Signed shortest offset from node a to node b in each dimension (wrap-around links)."""
    out = []
    for ca, cb, n in zip(torus_coords(a, dims), torus_coords(b, dims), dims, strict=True):
        d = (cb - ca) % n
        out.append(d - n if d > n // 2 else d)
    return tuple(out)


def torus_route(a: int, b: int, dims: tuple[int, int, int]) -> list[int]:
    """Nodes on the dimension-ordered (x, then y, then z) shortest route from a to b, both included."""
    coords, path = list(torus_coords(a, dims)), [a]
    for axis, off in enumerate(torus_offsets(a, b, dims)):
        for _ in range(abs(off)):
            coords[axis] = (coords[axis] + (1 if off > 0 else -1)) % dims[axis]
            path.append(coords[0] + dims[0] * (coords[1] + dims[1] * coords[2]))
    return path


def torus_link_gbytes_per_s(cluster: ClusterSpec) -> float:
    """Assumption: a node's NIC bandwidth is split evenly over its six torus links (+-x, +-y, +-z), each
    direction of each link carrying 1/6 of it (TPU-pod style; no separate switches)."""
    return cluster.node.nics * port_gbytes_per_s(cluster) / 6


# --------------------------------------------------------------------------------------------------------
# The graph


def build_graph(cluster: ClusterSpec, nodes: Iterable[int] | None = None) -> nx.Graph:
    """Graph of physical `nodes` (default: all) and the switches above them. Node kinds: gpu, nvswitch, nic,
    leaf, spine, core (fat tree, rail), router (dragonfly routers; a torus node's built-in router). Edge
    attributes: capacity_gbytes_per_s (one direction), level, cost (routing preference)."""
    ids = _window(cluster, nodes)
    graph = nx.Graph(topology=cluster.fabric.topology, num_gpus=cluster.num_gpus)
    nics = _add_scale_up(graph, cluster, ids)
    topology = cluster.fabric.topology
    if topology == "torus":
        _add_torus(graph, cluster, nics)
    elif topology == "dragonfly":
        _add_dragonfly(graph, cluster, nics)
    else:
        _add_tree(graph, cluster, nics)
    return graph


def _window(cluster: ClusterSpec, nodes: Iterable[int] | None) -> list[int]:
    total = max(1, math.ceil(cluster.num_gpus / cluster.node.gpus))
    if nodes is None:
        if total > MAX_GRAPH_NODES:
            raise ValueError(f"a whole-cluster graph of {total} nodes is too large (limit {MAX_GRAPH_NODES}); "
                             "pass `nodes` to build a window")
        return list(range(total))
    ids = sorted({int(n) for n in nodes})
    if ids and (ids[0] < 0 or ids[-1] >= total):
        raise ValueError(f"node ids must lie in [0, {total}) (got {ids[0]}..{ids[-1]})")
    return ids


def _edge(graph: nx.Graph, a: str, b: str, capacity: float, level_name: str) -> None:
    graph.add_edge(a, b, capacity_gbytes_per_s=float(capacity), level=level_name, cost=LEVEL_COST[level_name])


def _add_scale_up(graph: nx.Graph, cluster: ClusterSpec, ids: list[int]) -> dict[int, list[int]]:
    """GPUs on their domain's NVSwitch fabric, and each GPU's NICs (GPU j of a node uses NICs j*nics/G...).
    Returns the NIC indices present on each node (a cluster smaller than a node has fewer)."""
    g, nics, dom = cluster.node.gpus, cluster.node.nics, domain_gpus(cluster)
    nv, port = nvlink_gbytes_per_s(cluster), port_gbytes_per_s(cluster)
    present: dict[int, list[int]] = {}
    for n in ids:
        present[n] = []
        for local in range(min(g, cluster.num_gpus - n * g)):
            gpu = n * g + local
            graph.add_node(f"gpu:{gpu}", kind="gpu", node=n, domain=gpu // dom, local_rank=local)
            graph.add_node(f"nvswitch:{gpu // dom}", kind="nvswitch", domain=gpu // dom)
            _edge(graph, f"gpu:{gpu}", f"nvswitch:{gpu // dom}", nv, "nvlink")
            first, last = local * nics // g, max(local * nics // g + 1, (local + 1) * nics // g)
            for i in range(first, min(last, nics)):
                graph.add_node(f"nic:{n}.{i}", kind="nic", node=n, rail=i)
                _edge(graph, f"gpu:{gpu}", f"nic:{n}.{i}", port * (last - first), "pcie")
                present[n].append(i)
    return present


def _unit(cluster: ClusterSpec, node: int, name: str) -> int:
    """Index of the unit of level `name` that holds physical node `node`."""
    lv = level(cluster, name)
    return node * cluster.node.gpus // lv.unit_gpus if lv else 0


def _add_tree(graph: nx.Graph, cluster: ClusterSpec, nics: dict[int, list[int]]) -> None:
    """Fat tree (a node's NICs on its leaf) or rail-optimized (NIC i on rail leaf i of the scalable unit),
    aggregated spine per pod, one core above the pods."""
    rail = cluster.fabric.topology == "rail_optimized"
    leaf_lv, pod_lv = level(cluster, "leaf_uplink"), level(cluster, "pod_uplink")
    port, rails = port_gbytes_per_s(cluster), cluster.node.nics
    for n, present in nics.items():
        unit, pod = _unit(cluster, n, "leaf_uplink"), _unit(cluster, n, "pod_uplink")
        for i in present:
            leaf = f"leaf:{unit}.{i}" if rail else f"leaf:{unit}"
            graph.add_node(leaf, kind="leaf", unit=unit, rail=i if rail else None)
            _edge(graph, f"nic:{n}.{i}", leaf, port, "nic")
            if leaf_lv:
                trunk = leaf_lv.egress_gbytes_per_s / (rails if rail else 1)
                graph.add_node(f"spine:{pod}", kind="spine", pod=pod)
                _edge(graph, leaf, f"spine:{pod}", trunk, "leaf_uplink")
            if pod_lv:
                graph.add_node("core:0", kind="core")
                _edge(graph, f"spine:{pod}", "core:0", pod_lv.egress_gbytes_per_s, "pod_uplink")
    if rail and leaf_lv is None and domain_gpus(cluster) < cluster.node.gpus:
        _join_rails(graph, cluster)


def _join_rails(graph: nx.Graph, cluster: ClusterSpec) -> None:
    """One scalable unit of a rail-optimized fabric has no leaf-uplink level (no traffic leaves the unit), so no
    spine is drawn; but a node of several NVLink domains (H200 NVL: two 4-GPU bridges) reaches the rails of its
    other domain only through the spine the rail leaves connect to. Full bisection: a rail leaf's uplinks carry
    what its downlinks do (one port per node). Placement's costs come from `levels`, which this leaves alone."""
    nodes = max(1, math.ceil(cluster.num_gpus / cluster.node.gpus))
    leaves = [v for v, d in graph.nodes(data=True) if d["kind"] == "leaf"]
    graph.add_node("spine:0", kind="spine", pod=0)
    for leaf in leaves:
        _edge(graph, leaf, "spine:0", port_gbytes_per_s(cluster) * nodes, "leaf_uplink")


def _add_dragonfly(graph: nx.Graph, cluster: ClusterSpec, nics: dict[int, list[int]]) -> None:
    """Routers of a group fully connected by local links; each pair of groups joined by one global link
    between gateway routers (index (ga + gb) mod routers), carrying 1/(groups - 1) of a group's global capacity."""
    local_lv, global_lv = level(cluster, "local"), level(cluster, "global")
    router_gpus = local_lv.unit_gpus if local_lv else cluster.num_gpus
    group_gpus = global_lv.unit_gpus if global_lv else cluster.num_gpus
    per_group = max(1, group_gpus // router_gpus)
    routers = {}
    for n, present in nics.items():
        gpu = n * cluster.node.gpus
        routers[n] = (gpu // group_gpus, gpu % group_gpus // router_gpus)
        for i in present:
            _edge(graph, f"nic:{n}.{i}", _router(graph, *routers[n]), port_gbytes_per_s(cluster), "nic")
    groups = sorted({grp for grp, _ in routers.values()})
    if global_lv and len(groups) > 1:
        share = global_lv.egress_gbytes_per_s / max(1, math.ceil(cluster.num_gpus / group_gpus) - 1)
        for i, ga in enumerate(groups):
            for gb in groups[i + 1:]:
                gate = (ga + gb) % per_group
                _edge(graph, _router(graph, ga, gate), _router(graph, gb, gate), share, "global")
    members = [(n, d) for n, d in graph.nodes(data=True) if d["kind"] == "router"]
    for i, (a, da) in enumerate(members):
        for b, db in members[i + 1:]:
            if da["group"] == db["group"] and local_lv:
                _edge(graph, a, b, local_lv.egress_gbytes_per_s, "local")


def _router(graph: nx.Graph, group: int, index: int) -> str:
    name = f"router:{group}.{index}"
    graph.add_node(name, kind="router", group=group, index=index)
    return name


def _add_torus(graph: nx.Graph, cluster: ClusterSpec, nics: dict[int, list[int]]) -> None:
    """Each node's NICs feed its torus router; routers of neighbouring nodes are joined by torus links (a
    dimension of size 2 has both its + and - links to the same neighbour, hence twice the capacity)."""
    dims = torus_dims(max(1, math.ceil(cluster.num_gpus / cluster.node.gpus)))
    link = torus_link_gbytes_per_s(cluster)
    for n, present in nics.items():
        graph.add_node(f"router:{n}", kind="router", node=n, coords=torus_coords(n, dims))
        for i in present:
            _edge(graph, f"nic:{n}.{i}", f"router:{n}", port_gbytes_per_s(cluster), "nic")
    for n in nics:
        for axis, size in enumerate(dims):
            if size == 1:
                continue
            coords = list(torus_coords(n, dims))
            coords[axis] = (coords[axis] + 1) % size
            m = coords[0] + dims[0] * (coords[1] + dims[1] * coords[2])
            if m in nics:
                _edge(graph, f"router:{n}", f"router:{m}", link * (2 if size == 2 else 1), "torus")
