"""The cluster graph and its scale-out levels: shapes, capacities, and the two views agreeing."""
from __future__ import annotations

import dataclasses
from collections import Counter

import networkx as nx
import pytest

from planner.catalog import load_catalog
from planner.spec import FABRIC_FIELDS, GPU_FIELDS, NODE_FIELDS, ClusterSpec, FabricSpec, GPUSpec, NodeSpec
from planner.topology import (build_graph, level, levels, port_gbytes_per_s, torus_dims, torus_offsets,
                              torus_route)

CATALOG = load_catalog()


def make_cluster(num_gpus: int, node: str = "DGX H100", fabric: str = "NDR InfiniBand fat tree",
                 gpu: str = "H100 SXM5 80GB", **fabric_changes) -> ClusterSpec:
    """A cluster from catalog names, spec defaults filled in; keyword arguments override fabric fields."""
    def row(fields, section, name):
        values = {f.name: f.default for f in fields}
        values.update(CATALOG[section][name])
        return values
    n = row(NODE_FIELDS, "node", node)
    n["nvlink_domain_gpus"] = n["nvlink_domain_gpus"] or n["gpus"]
    f = row(FABRIC_FIELDS, "fabric", fabric)
    f.update(fabric_changes)
    return ClusterSpec(num_gpus, GPUSpec(**row(GPU_FIELDS, "gpu", gpu)), NodeSpec(**n), FabricSpec(**f))


def kinds(graph: nx.Graph) -> Counter:
    return Counter(d["kind"] for _, d in graph.nodes(data=True))


def edges_of(graph: nx.Graph, level_name: str) -> list[dict]:
    return [d for _, _, d in graph.edges(data=True) if d["level"] == level_name]


def test_it_builds_a_dgx_h100_rail_optimized_cluster():
    graph = build_graph(make_cluster(64, fabric="NDR InfiniBand rail-optimized (DGX SuperPOD)"))
    # 8 nodes of 8 GPUs, one NVSwitch fabric each, 8 NICs each on 8 rail leaves; one scalable unit: no spine.
    assert kinds(graph) == {"gpu": 64, "nic": 64, "nvswitch": 8, "leaf": 8}
    assert {d["capacity_gbytes_per_s"] for d in edges_of(graph, "nvlink")} == {450.0}  # 900 bidirectional
    assert {d["capacity_gbytes_per_s"] for d in edges_of(graph, "nic")} == {50.0}     # 400 Gb/s
    # NIC i of every node sits on rail leaf i.
    assert sorted(graph.neighbors("leaf:0.3")) == [f"nic:{n}.3" for n in range(8)]


def test_nvlink_domain_spans_the_trays_of_an_nvl72_rack():
    graph = build_graph(make_cluster(144, node="GB200 NVL72 compute tray", fabric="XDR InfiniBand fat tree",
                                     gpu="GB200"))
    assert kinds(graph)["nvswitch"] == 2 and kinds(graph)["gpu"] == 144
    assert sorted(graph.neighbors("nvswitch:0"), key=lambda v: int(v.split(":")[1])) == \
        [f"gpu:{i}" for i in range(72)]
    assert graph.nodes["gpu:71"]["node"] == 17 and graph.nodes["gpu:72"]["domain"] == 1


def test_fabric_port_speed_caps_a_faster_nic():
    hdr = make_cluster(16, fabric="HDR InfiniBand fat tree")   # DGX H100's 400G NICs on a 200G fabric
    assert port_gbytes_per_s(hdr) == 25.0
    assert {d["capacity_gbytes_per_s"] for d in edges_of(build_graph(hdr), "nic")} == {25.0}


def test_fat_tree_leaf_sizes_follow_radix_and_oversubscription():
    full = levels(make_cluster(1024))
    tapered = levels(make_cluster(1024, fabric="NDR InfiniBand fat tree 2:1 oversubscribed"))
    # Radix 64 at 1:1: 32 downlinks = 4 DGX nodes; at 2:1: 42 downlinks = 5 nodes, uplinks half of them.
    assert (full[1].name, full[1].unit_gpus, full[1].egress_gbytes_per_s) == ("leaf_uplink", 32, 1600.0)
    assert (tapered[1].unit_gpus, tapered[1].egress_gbytes_per_s) == (40, 1000.0)
    # A two-level Clos of radix 64 holds 64 x 32 ports = 256 DGX nodes; 1,024 GPUs need no core layer.
    assert [lv.name for lv in full] == ["nic", "leaf_uplink"]


def test_rail_optimized_scalable_unit_is_one_leaf_per_rail():
    lv = level(make_cluster(1024, fabric="NDR InfiniBand rail-optimized (DGX SuperPOD)"), "leaf_uplink")
    assert (lv.unit_gpus, lv.egress_gbytes_per_s) == (256, 12800.0)        # 32 nodes (DGX H100 SuperPOD SU)
    selene = level(make_cluster(1024, node="DGX A100", gpu="A100 SXM4 80GB",
                                fabric="HDR InfiniBand rail-optimized (DGX SuperPOD)"), "leaf_uplink")
    assert selene.unit_gpus == 160                                          # 20 nodes, Selene's SU


def test_llama3_pods_taper_one_to_seven():
    pod = level(make_cluster(16384, fabric="RoCEv2 400 GbE (Llama 3 style)"), "pod_uplink")
    assert pod.unit_gpus == 3072
    assert pod.egress_gbytes_per_s == pytest.approx(3072 * 50 / 7)


def test_trunk_capacities_in_the_graph_match_the_levels():
    """Two independent views: the graph's uplink edges of one unit add up to the level's egress."""
    for fabric in ("NDR InfiniBand fat tree 2:1 oversubscribed", "NDR InfiniBand rail-optimized (DGX SuperPOD)",
                   "RoCEv2 400 GbE (Llama 3 style)"):
        cluster = make_cluster(16384, fabric=fabric)
        graph = build_graph(cluster, [0, 1000])
        leaf_lv, pod_lv = level(cluster, "leaf_uplink"), level(cluster, "pod_uplink")
        node0_leaves = {v for u in graph.neighbors("gpu:0") for v in graph.neighbors(u)} | \
            {v for i in range(8) for v in graph.neighbors(f"nic:0.{i}")}
        uplinks = sum(graph.edges[leaf, "spine:0"]["capacity_gbytes_per_s"]
                      for leaf in node0_leaves if graph.has_edge(leaf, "spine:0"))
        assert uplinks == pytest.approx(leaf_lv.egress_gbytes_per_s), fabric
        assert graph.edges["spine:0", "core:0"]["capacity_gbytes_per_s"] == pytest.approx(pod_lv.egress_gbytes_per_s)


def test_a_window_does_not_grow_with_the_cluster():
    small = build_graph(make_cluster(16384, fabric="NDR InfiniBand fat tree 2:1 oversubscribed"), [0, 1000])
    large = build_graph(make_cluster(131072, fabric="NDR InfiniBand fat tree 2:1 oversubscribed"), [0, 1000])
    # 2 nodes: 16 GPUs, 16 NICs, 2 NVSwitches, 2 leaves, the spines of 2 pods, 1 core.
    assert small.number_of_nodes() == large.number_of_nodes() == 16 + 16 + 2 + 2 + 2 + 1
    with pytest.raises(ValueError, match="too large"):
        build_graph(make_cluster(131072))
    with pytest.raises(ValueError, match="node ids"):
        build_graph(make_cluster(64), [8])


def test_paths_climb_only_as_high_as_they_must():
    cluster = make_cluster(16384, fabric="RoCEv2 400 GbE (Llama 3 style)")
    switches = {"gpu:8": 1, "gpu:32": 3, "gpu:3072": 5}       # same leaf, same pod, another pod
    for target, hops in switches.items():
        graph = build_graph(cluster, [0, int(target.split(":")[1]) // 8])
        path = nx.shortest_path(graph, "gpu:0", target, weight="cost")
        assert sum(graph.nodes[v]["kind"] in ("leaf", "spine", "core") for v in path) == hops


def test_rail_optimized_crosses_rails_over_nvlink_not_the_spine():
    """PXN: GPU 4 of node 0 reaches GPU 0 of node 1 through NVLink and rail 0, never through a spine."""
    cluster = make_cluster(1024, fabric="NDR InfiniBand rail-optimized (DGX SuperPOD)")
    graph = build_graph(cluster, [0, 1])
    path = nx.shortest_path(graph, "gpu:4", "gpu:8", weight="cost")
    assert "nvswitch:0" in path and not any(v.startswith("spine") for v in path)


def test_dragonfly_groups_and_global_links():
    cluster = make_cluster(16384, fabric="Dragonfly 400 Gb/s (Slingshot-style)")
    local, glob = level(cluster, "local"), level(cluster, "global")
    assert (local.unit_gpus, glob.unit_gpus) == (16, 1024)               # 16 terminals per radix-64 router
    assert glob.egress_gbytes_per_s == pytest.approx(1024 * 50 / 2)      # global links tapered 2:1
    graph = build_graph(cluster, [0, 128])                               # nodes in groups 0 and 1
    path = nx.shortest_path(graph, "gpu:0", "gpu:1024", weight="cost")
    assert sum(graph.nodes[v]["kind"] == "router" for v in path) == 4    # router, gateway, gateway, router
    (glob_edge,) = edges_of(graph, "global")
    assert glob_edge["capacity_gbytes_per_s"] == pytest.approx(glob.egress_gbytes_per_s / 15)


def test_torus_dims_are_near_cubic():
    assert torus_dims(128) == (4, 4, 8)
    assert torus_dims(2048) == (8, 16, 16)
    assert torus_dims(16384) == (16, 32, 32)
    assert torus_dims(97) == (1, 1, 97)                                  # a prime: a ring


def test_torus_nodes_have_six_links_of_a_sixth_of_their_nics():
    cluster = make_cluster(512, fabric="3D torus 400 Gb/s")             # 64 nodes: 4 x 4 x 4
    graph = build_graph(cluster)
    routers = [v for v, d in graph.nodes(data=True) if d["kind"] == "router"]
    assert len(routers) == 64
    assert {sum(graph.edges[r, n]["level"] == "torus" for n in graph.neighbors(r)) for r in routers} == {6}
    assert all(d["capacity_gbytes_per_s"] == pytest.approx(400 / 6) for d in edges_of(graph, "torus"))


def test_torus_routes_wrap_around():
    dims = (4, 4, 8)
    assert torus_offsets(0, 3, dims) == (-1, 0, 0)                        # x = 3 is one hop back
    assert torus_route(0, 3, dims) == [0, 3]
    assert len(torus_route(0, 2 + 4 * 2 + 16 * 4, dims)) == 1 + 2 + 2 + 4


def test_small_clusters_fit_inside_one_node():
    cluster = dataclasses.replace(make_cluster(8), num_gpus=4)
    assert levels(cluster) == ()
    assert kinds(build_graph(cluster)) == {"gpu": 4, "nvswitch": 1, "nic": 4, "leaf": 1}


def test_a_node_of_two_nvlink_domains_reaches_its_other_rails_through_the_spine():
    """H200 NVL servers: two 4-GPU NVLink-bridge domains per node, 4 NICs. In one rail-optimized scalable unit
    GPU 3 (rail 1) reaches GPU 4 (rail 2) only over the spine joining the rail leaves."""
    from planner import parse_spec
    from planner.catalog import load_catalog

    spec = parse_spec({"model": {"layers": 2, "hidden": 64, "heads": 4, "vocab": 128, "seq_len": 16},
                       "training": {"global_batch": 8},
                       "cluster": {"num_gpus": 16, "gpu": "H200 NVL", "node": "H200 NVL server (4-GPU NVLink bridges)",
                                   "fabric": "XDR InfiniBand rail-optimized (Quantum-X800)"}}, load_catalog())
    graph = build_graph(spec.cluster)
    path = nx.shortest_path(graph, "gpu:3", "gpu:4", weight="cost")
    assert [graph.nodes[v]["kind"] for v in path] == ["gpu", "nic", "leaf", "spine", "leaf", "nic", "gpu"]
    assert graph.edges[path[2], path[3]]["capacity_gbytes_per_s"] == 2 * 50  # 2 nodes x one 400 Gb/s NIC port
