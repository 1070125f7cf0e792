"""Placement: rank order to GPUs, TP kept inside NVLink domains, links crossed and contention counted."""
from __future__ import annotations

import dataclasses
import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.placement import PlacementRejected, place, placement_map, rank_strides
from planner.spec import RANK_ORDERS
from planner.topology import domain_gpus, levels

from .test_topology import make_cluster

RAIL = "NDR InfiniBand rail-optimized (DGX SuperPOD)"
TAPERED = "NDR InfiniBand fat tree 2:1 oversubscribed"


# --------------------------------------------------------------------------------------------------------
# Brute force: every rank's coordinates, every group listed (independent of placement.py's arithmetic)


def coordinates(rank: int, tp: int, cp: int, dp: int, pp: int, order: str) -> dict[str, int]:
    rest = rank // (tp * cp)
    dp_i, pp_i = (rest % dp, rest // dp) if order == "tp-cp-dp-pp" else (rest // pp, rest % pp)
    return {"tp": rank % tp, "cp": rank // tp % cp, "dp": dp_i, "pp": pp_i}


def brute_groups(n: int, tp: int, cp: int, dp: int, pp: int, ep: int, order: str) -> dict[str, list[list[int]]]:
    """kind -> groups (GPU lists): ranks that share every coordinate but the kind's own (EP: ep consecutive ranks
    of one stage, counted over TP, CP and DP innermost first)."""
    groups: dict[str, dict[tuple, list[int]]] = {k: {} for k in ("tp", "cp", "dp", "pp", "ep")}
    for r in range(n):
        c = coordinates(r, tp, cp, dp, pp, order)
        for kind in ("tp", "cp", "dp", "pp"):
            groups[kind].setdefault(tuple(v for k, v in c.items() if k != kind), []).append(r)
        folded = c["tp"] + tp * (c["cp"] + cp * c["dp"])
        groups["ep"].setdefault((c["pp"], folded // ep), []).append(r)
    return {k: list(v.values()) for k, v in groups.items()}


def most_units(groups: list[list[int]], unit: int) -> int:
    return max(len({g // unit for g in members}) for members in groups)


def most_sharing(groups: list[list[int]], unit: int) -> int:
    """Groups with members both inside and outside one unit, in the worst unit."""
    crossing: dict[int, int] = {}
    for members in groups:
        units = {g // unit for g in members}
        if len(units) > 1:
            for u in units:
                crossing[u] = crossing.get(u, 0) + 1
    return max(crossing.values(), default=0)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


# --------------------------------------------------------------------------------------------------------
# TP inside the NVLink domain


def test_it_rejects_tp_across_the_nvlink_domain():
    with pytest.raises(PlacementRejected) as exc:
        place(make_cluster(1024), 16, 1, 8, 8, 1, "tp-cp-dp-pp")
    assert exc.value.reason == "tp_crosses_nvlink_domain"
    assert exc.value.message == "TP=16 crosses the 8-GPU NVLink domain"


def test_it_rejects_tp_that_does_not_divide_an_nvl72_domain():
    nvl72 = make_cluster(4608, node="GB200 NVL72 compute tray", fabric="XDR InfiniBand fat tree", gpu="GB200")
    with pytest.raises(PlacementRejected, match="TP=16 does not divide the 72-GPU NVLink domain") as exc:
        place(nvl72, 16, 1, 36, 8, 1, "tp-cp-dp-pp")
    assert exc.value.reason == "tp_crosses_nvlink_domain"


def test_tp_spans_the_trays_of_an_nvl72_rack_over_nvlink():
    nvl72 = make_cluster(4608, node="GB200 NVL72 compute tray", fabric="XDR InfiniBand fat tree", gpu="GB200")
    tp = place(nvl72, 72, 1, 8, 8, 1, "tp-cp-dp-pp").groups["tp"]
    assert (tp.domains, tp.nodes, tp.fabric, tp.links) == (1, 18, "nvlink", ("nvlink",))
    assert tp.nvlink_busbw_gbytes_per_s == pytest.approx(0.79 * 900)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_tp_never_leaves_an_nvlink_domain(data):
    """Accepted TP groups lie in one domain; rejected ones would have crossed one (brute force)."""
    node, fabric = data.draw(st.sampled_from([("DGX H100", TAPERED), ("GB200 NVL72 compute tray", RAIL),
                                              ("DGX A100", "EDR InfiniBand fat tree")]))
    g = 4 if node.startswith("GB200") else 8
    n = g * data.draw(st.integers(1, 48))
    tp = data.draw(st.sampled_from(divisors(n)))
    cp = data.draw(st.sampled_from(divisors(n // tp)))
    pp = data.draw(st.sampled_from(divisors(n // tp // cp)))
    dp = n // (tp * cp * pp)
    order = data.draw(st.sampled_from(RANK_ORDERS))
    cluster = make_cluster(n, node=node, fabric=fabric)
    dom = domain_gpus(cluster)
    crosses = most_units(brute_groups(n, tp, cp, dp, pp, 1, order)["tp"], dom) > 1
    try:
        placed = place(cluster, tp, cp, dp, pp, 1, order)
    except PlacementRejected as exc:
        assert exc.reason == "tp_crosses_nvlink_domain" and crosses
        return
    assert not crosses and placed.tp_inside_nvlink_domain
    assert placed.groups["tp"].domains == 1 and placed.groups["tp"].fabric == "nvlink"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_group_shapes_match_brute_force(data):
    """Strides, worst-case domains and nodes spanned, and the sharing of each unit's egress, against
    enumerating every rank. Sharing is exact where units and groups align, and otherwise the documented upper
    bound (twice the aligned count), which a large cluster reaches but a cluster of one or two leaves may not."""
    node = data.draw(st.sampled_from(["DGX H100", "GB200 NVL72 compute tray"]))
    g = 4 if node.startswith("GB200") else 8
    n = g * data.draw(st.integers(1, 48))
    cluster = make_cluster(n, node=node, fabric=TAPERED)
    dom = domain_gpus(cluster)
    tp = data.draw(st.sampled_from([d for d in divisors(n) if dom % d == 0]))
    cp = data.draw(st.sampled_from(divisors(n // tp)))
    pp = data.draw(st.sampled_from(divisors(n // tp // cp)))
    dp = n // (tp * cp * pp)
    order = data.draw(st.sampled_from(RANK_ORDERS))
    stage = tp * cp * dp if order == "tp-cp-dp-pp" or pp == 1 else tp * cp  # EP must stay within a stage's block
    ep = data.draw(st.sampled_from(divisors(stage)))
    placed = place(cluster, tp, cp, dp, pp, ep, order)
    for kind, groups in brute_groups(n, tp, cp, dp, pp, ep, order).items():
        gp = placed.groups[kind]
        assert {m[1] - m[0] for m in groups if len(m) > 1} <= {gp.stride}
        assert gp.size == len(groups[0])
        assert gp.domains == most_units(groups, dom), kind
        assert gp.nodes == most_units(groups, min(g, n)), kind
        for lv in levels(cluster):
            brute = most_sharing(groups, lv.unit_gpus)
            shared = gp.shared_by.get(lv.name, 0)
            if lv.name not in gp.shared_by:
                assert brute == 0, (kind, lv.name)
            elif gp.stride * gp.size % lv.unit_gpus == 0:
                assert shared == brute, (kind, lv.name)
            else:
                assert brute <= shared <= min(lv.unit_gpus, 2 * gp.stride), (kind, lv.name)


# --------------------------------------------------------------------------------------------------------
# Links, contention and bandwidth


def test_contention_appears_on_an_oversubscribed_fat_tree_and_not_on_a_rail_optimized_one():
    """DP 8 with PP innermost: each DP ring has one member per 5-node leaf, so 40 rings leave every leaf
    through uplinks worth 20 ports (2:1), half a NIC each. Rail-optimized scalable units hold 32 nodes at
    1:1: the NIC stays the bottleneck."""
    tapered = place(make_cluster(1024, fabric=TAPERED), 8, 1, 8, 16, 1, "tp-cp-pp-dp").groups["dp"]
    assert tapered.links == ("nic", "leaf_uplink")
    assert tapered.shared_by == {"nic": 8, "leaf_uplink": 40}
    assert tapered.egress_gbytes_per_s == {"nic": 50.0, "leaf_uplink": 25.0}
    assert tapered.bottleneck == "leaf_uplink"
    assert tapered.scaleout_busbw_gbytes_per_s == pytest.approx(0.95 * 25)
    rail = place(make_cluster(1024, fabric=RAIL), 8, 1, 8, 16, 1, "tp-cp-pp-dp").groups["dp"]
    assert rail.bottleneck == "nic"
    assert rail.shared_by["leaf_uplink"] == 128 and rail.egress_gbytes_per_s["leaf_uplink"] == 100.0
    assert rail.scaleout_busbw_gbytes_per_s == pytest.approx(0.95 * 50)
    full = place(make_cluster(1024), 8, 1, 8, 16, 1, "tp-cp-pp-dp").groups["dp"]
    assert full.scaleout_busbw_gbytes_per_s == pytest.approx(0.95 * 50)   # full bisection: no contention


def test_rank_order_decides_which_group_meets_the_taper():
    cluster = make_cluster(1024, fabric=TAPERED)
    dp_inner = place(cluster, 8, 1, 8, 16, 1, "tp-cp-dp-pp")
    assert dp_inner.groups["dp"].bottleneck == "nic" and dp_inner.groups["pp"].bottleneck == "leaf_uplink"
    pp_inner = place(cluster, 8, 1, 8, 16, 1, "tp-cp-pp-dp")
    assert pp_inner.groups["pp"].bottleneck == "nic" and pp_inner.groups["dp"].bottleneck == "leaf_uplink"


def test_dp_with_two_members_per_node_uses_two_nics_and_nvlink():
    dp = place(make_cluster(1024, fabric=RAIL), 4, 1, 16, 16, 1, "tp-cp-dp-pp").groups["dp"]
    assert (dp.per_domain, dp.domains, dp.shared_by) == (2, 8, {"nic": 4})
    assert dp.links == ("nvlink", "nic")              # the cross-rail hop goes over NVLink (PXN)
    assert dp.scaleout_busbw_gbytes_per_s == pytest.approx(0.95 * 100)
    assert dp.nvlink_busbw_gbytes_per_s == pytest.approx(0.79 * 450)


def test_llama3_pods_limit_all_to_all_but_not_rings():
    """Across 1:7 pods a DP ring needs one ring's worth per pod; an EP all-to-all pushes m (n - m) / n of its
    buffer per member through the pod uplinks."""
    cluster = make_cluster(16384, fabric="RoCEv2 400 GbE (Llama 3 style)")
    dp = place(cluster, 8, 1, 128, 16, 1, "tp-cp-pp-dp").groups["dp"]
    assert "pod_uplink" in dp.links and dp.bottleneck == "nic" and dp.hops == 5
    # EP 4,096 over consecutive GPUs: groups of 4,096 straddle the 3,072-GPU pods; GPUs 4,096-8,191 split 2,048 /
    # 2,048 over two pods, and the worst pod's uplinks carry the 2 groups that leave it.
    ep = place(cluster, 1, 1, 16384, 1, 4096, "tp-cp-dp-pp").groups["ep"]
    assert (ep.members_per_unit["pod_uplink"], ep.shared_by["pod_uplink"]) == (2048, 2)
    assert ep.egress_gbytes_per_s["pod_uplink"] == pytest.approx(3072 * 50 / 7 / 2)


def test_torus_rings_along_a_dimension_share_each_link_once_per_gpu():
    cluster = make_cluster(512, fabric="3D torus 400 Gb/s")   # 64 nodes, 4 x 4 x 4
    aligned = place(cluster, 8, 1, 4, 16, 1, "tp-cp-dp-pp").groups["dp"]   # one node apart: along x
    assert aligned.shared_by == {"torus": 8}                   # 8 GPUs' rings on every x link
    assert aligned.scaleout_busbw_gbytes_per_s == pytest.approx(0.95 * 2 * 400 / 6 / 8)
    strided = place(cluster, 8, 2, 4, 8, 1, "tp-cp-dp-pp").groups["dp"]   # two nodes apart: multi-hop
    assert strided.shared_by["torus"] > aligned.shared_by["torus"]
    assert strided.hops > aligned.hops


def test_a_torus_group_between_the_nvlink_domains_of_one_node_is_limited_by_their_nics():
    # Two 4-GPU NVLink domains in one 8-GPU H200 NVL server: a DP group over both crosses no torus link (its
    # traffic turns in the node's own router), so each domain's NICs bound it. It was a division by zero.
    cluster = make_cluster(512, node="H200 NVL server (4-GPU NVLink bridges)", fabric="3D torus 400 Gb/s",
                           gpu="H200 NVL")
    dp = place(cluster, 4, 1, 2, 64, 1, "tp-cp-dp-pp").groups["dp"]
    assert (dp.domains, dp.nodes, dp.links) == (2, 1, ("nic",))
    # 4 NICs of 400 Gb/s for 8 GPUs: 25 GB/s a GPU; a domain's 4 GPUs hold 4 groups, one member each.
    assert dp.egress_gbytes_per_s == {"nic": pytest.approx(25.0)}
    assert dp.scaleout_busbw_gbytes_per_s == pytest.approx(0.95 * 25.0)
    across = place(cluster, 4, 1, 4, 32, 1, "tp-cp-dp-pp").groups["dp"]   # two nodes: torus links as before
    assert "torus" in across.links


def test_dragonfly_groups_cross_global_links():
    cluster = make_cluster(16384, fabric="Dragonfly 400 Gb/s (Slingshot-style)")
    dp = place(cluster, 8, 1, 128, 16, 1, "tp-cp-pp-dp").groups["dp"]
    assert dp.links == ("nic", "local", "global") and dp.hops == 4
    assert dp.fabric == "roce"  # Slingshot-style: RDMA over Ethernet


def test_place_costs_the_same_on_any_cluster_size():
    """Graph work is per shape and cached; nothing iterates over GPUs. Generous bound, one core."""
    per_call = {}
    for n in (1024, 131072):
        cluster = make_cluster(n, fabric=RAIL)
        layouts = [(tp, 1, n // (tp * pp), pp, 1, order) for tp in (1, 2, 4, 8) for pp in (1, 4, 16)
                   for order in RANK_ORDERS]
        for lay in layouts:
            place(cluster, *lay)
        start = time.perf_counter()
        for _ in range(20):
            for lay in layouts:
                place(cluster, *lay)
        per_call[n] = (time.perf_counter() - start) / (20 * len(layouts))
    assert per_call[131072] < 1e-3
    assert per_call[131072] < 4 * per_call[1024]


# --------------------------------------------------------------------------------------------------------
# What callers see


def test_describe_reads_like_a_plan():
    placed = place(make_cluster(1024, node="DGX A100", gpu="A100 SXM4 80GB",
                                fabric="HDR InfiniBand rail-optimized (DGX SuperPOD)"), 8, 1, 4, 32, 1, "tp-cp-dp-pp")
    # Selene-like: DP rings stay inside a 20-node scalable unit, on their rails; PP climbs to the spines.
    assert placed.describe() == ("TP 8 inside each NVLink domain, DP 4 across 4 nodes over InfiniBand (rail-aligned), "
                                 "PP 32 across 32 nodes over InfiniBand")
    tapered = place(make_cluster(1024, fabric=TAPERED), 8, 1, 8, 16, 1, "tp-cp-pp-dp")
    assert "DP 8 across 8 nodes over InfiniBand (leaf uplinks shared 40-way)" in tapered.describe()


def test_as_dict_is_plain_json():
    placed = place(make_cluster(16384, fabric="3D torus 400 Gb/s"), 8, 2, 64, 16, 8, "tp-cp-pp-dp")
    doc = placed.as_dict()
    assert json.loads(json.dumps(doc)) == doc            # no numpy scalars, no tuples
    assert doc["rank_order"] == ["tp", "cp", "pp", "dp"] and doc["tp_groups_inside_nvlink_domain"] is True
    assert doc["groups"]["dp"]["links"] == ["nic", "torus"]


def test_rank_strides_follow_the_order():
    assert rank_strides(8, 2, 4, 16, 2, "tp-cp-dp-pp") == {"tp": (1, 8), "cp": (8, 2), "dp": (16, 4),
                                                           "pp": (64, 16), "ep": (1, 2)}
    assert rank_strides(8, 2, 4, 16, 2, "tp-cp-pp-dp")["dp"] == (256, 4)


def test_it_rejects_ep_that_does_not_divide_the_ranks_of_a_stage():
    with pytest.raises(PlacementRejected) as exc:
        place(make_cluster(1024), 8, 1, 8, 16, 3, "tp-cp-dp-pp")
    assert (exc.value.reason, exc.value.message) == ("ep_not_dividing_ranks", "EP=3 does not divide TP·CP·DP=64")


def test_expert_groups_fold_over_tensor_and_data_parallel_ranks():
    # Megatron-Core with expert tensor parallelism 1: EP 16 over TP 2 x DP 8 is 16 consecutive GPUs, two 8-GPU
    # nodes, where EP carved out of DP alone would span four.
    p = place(make_cluster(128), 2, 1, 16, 4, 16, "tp-cp-dp-pp")
    assert (p.groups["ep"].stride, p.groups["ep"].size, p.groups["ep"].nodes) == (1, 16, 2)
    with pytest.raises(PlacementRejected) as exc:
        place(make_cluster(128), 2, 1, 16, 4, 16, "tp-cp-pp-dp")
    assert exc.value.reason == "ep_across_pipeline_stages"


def test_caller_errors_are_value_errors():
    with pytest.raises(ValueError, match="rank order"):
        place(make_cluster(64), 8, 1, 8, 1, 1, "pp-dp-tp")
    with pytest.raises(ValueError, match="must equal num_gpus"):
        place(make_cluster(64), 8, 1, 4, 1, 1, "tp-cp-dp-pp")
    with pytest.raises(ValueError, match="positive"):
        place(make_cluster(64), 8, 1, 8, 1, 0, "tp-cp-dp-pp")


def test_placement_map_shows_whole_nvl72_racks_not_parts_of_them():
    """On GB200 NVL72 (4-GPU trays, 72-GPU NVLink domains) the map shows whole racks, so each outline drawn is a
    whole domain: three racks fit 256 GPUs, the ones holding the first GPU of pipeline stages 0, 1 and 2 (stage
    s starts at GPU 512 s: racks 0, 7 and 14), the later two shared by the stage before."""
    cluster = make_cluster(4608, node="GB200 NVL72 compute tray", gpu="GB200",
                           fabric="XDR InfiniBand rail-optimized (Quantum-X800)")
    assert (domain_gpus(cluster), cluster.node.gpus) == (72, 4)
    m = placement_map(cluster, 4, 2, 64, 9, 1, "tp-cp-dp-pp")
    assert (m["gpus_total"], m["gpus_shown"], m["nvlink_domain_gpus"]) == (4608, 216, 72)
    domains = {}
    for c in m["cells"]:
        domains.setdefault(c["domain"], []).append(c["gpu"])
    assert {d: sorted(g) for d, g in domains.items()} == {d: list(range(72 * d, 72 * d + 72)) for d in (0, 7, 14)}
    assert {c["pp"] for c in m["cells"] if c["domain"] == 7} == {0, 1}   # GPUs 504-511 of stage 0, then stage 1
    # An 8-GPU node that is its own domain keeps whole nodes (the test above); so does a domain over the limit.
    nvl576 = dataclasses.replace(cluster, node=dataclasses.replace(cluster.node, nvlink_domain_gpus=576))
    wide = placement_map(nvl576, 4, 2, 64, 9, 1, "tp-cp-dp-pp")
    assert wide["gpus_shown"] == 256 and len({c["node"] for c in wide["cells"]}) == 64


def test_an_uneven_spread_over_nvlink_domains_is_described_as_it_is():
    """64 DP ranks 8 GPUs apart on 72-GPU NVLink domains sit 9, 9, ... 9 and 1 to a domain: the description says
    "up to 9", not the rounded mean of 8 that the costs use; where every domain holds as many, it says so plainly."""
    nvl72 = make_cluster(4608, node="GB200 NVL72 compute tray", gpu="GB200",
                         fabric="XDR InfiniBand rail-optimized (Quantum-X800)")
    dp = place(nvl72, 4, 2, 64, 9, 1, "tp-cp-dp-pp").groups["dp"]
    assert (dp.per_domain, dp.domains, dp.most_per_domain, dp.even_per_domain) == (8, 8, 9, False)
    assert "DP 64 across 8 NVLink domains over InfiniBand (up to 9 per NVLink domain)" in place(
        nvl72, 4, 2, 64, 9, 1, "tp-cp-dp-pp").describe()
    dgx = place(make_cluster(1024), 4, 1, 32, 8, 1, "tp-cp-dp-pp").groups["dp"]  # 2 ranks on each 8-GPU node
    assert (dgx.per_domain, dgx.most_per_domain, dgx.even_per_domain) == (2, 2, True)
    assert "(2 per NVLink domain" in place(make_cluster(1024), 4, 1, 32, 8, 1, "tp-cp-dp-pp").describe()


def test_groups_across_racks_of_trays_are_counted_in_nvlink_domains_not_nodes():
    """Nine pipeline stages on nine NVL72 racks were "PP 9 across 9 nodes" (trays); where a domain is one node,
    nodes it stays."""
    nvl72 = make_cluster(4608, node="GB200 NVL72 compute tray", gpu="GB200",
                         fabric="XDR InfiniBand rail-optimized (Quantum-X800)")
    assert "PP 9 across 9 NVLink domains over InfiniBand" in place(nvl72, 4, 2, 64, 9, 1, "tp-cp-dp-pp").describe()
    assert "PP 4 across 4 nodes over InfiniBand" in place(make_cluster(1024), 8, 1, 32, 4, 1,
                                                          "tp-cp-dp-pp").describe()


def test_a_cluster_smaller_than_a_node():
    cluster = dataclasses.replace(make_cluster(8), num_gpus=4)
    placed = place(cluster, 2, 1, 2, 1, 1, "tp-cp-dp-pp")
    assert placed.groups["dp"].fabric == "nvlink" and placed.groups["dp"].nodes == 1


def test_placement_map_shows_whole_nodes_of_several_stages():
    cluster = make_cluster(1024)
    m = placement_map(cluster, 8, 1, 8, 16, 1, "tp-cp-dp-pp")
    assert (m["gpus_total"], m["gpus_shown"], m["gpus_per_node"], m["nvlink_domain_gpus"]) == (1024, 256, 8, 8)
    assert sorted({c["pp"] for c in m["cells"]}) == [0, 1, 2, 3]
    assert len({c["node"] for c in m["cells"]}) == 32                      # whole nodes only
    cell = next(c for c in m["cells"] if c["gpu"] == 77)                  # 77 = 5 + 8 * (1 + 8 * 1)
    assert cell == {"gpu": 77, "node": 9, "domain": 9, "rank": 77, "tp": 5, "cp": 0, "dp": 1, "pp": 1, "ep": 0}
    small = placement_map(make_cluster(64), 8, 1, 2, 4, 2, "tp-cp-pp-dp")
    assert small["gpus_shown"] == 64 and {c["ep"] for c in small["cells"]} == {0, 1}
    assert json.loads(json.dumps(small)) == small


@pytest.mark.parametrize("unit", [4, 8, 72, 576])
def test_the_counted_domain_spread_agrees_with_the_closed_form(unit):
    """placement._domain_spread counts a group's members unit by unit; its members per unit and units spanned must
    be _spread's, which the costs of every other unit (nodes, switches) use."""
    from planner.placement import _domain_spread, _spread
    for stride in (1, 2, 3, 4, 8, 9, 16, 24, 36, 64, 72, 128, 512):
        for size in (1, 2, 3, 8, 9, 16, 64, 128):
            for total in (unit * 64, stride * size * 8):
                if stride * size <= total:
                    assert _domain_spread(stride, size, unit, total)[:2] == _spread(stride, size, unit, total)
