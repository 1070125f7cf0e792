"""Time of one collective on one parallel group: latency + bytes / bandwidth, the way NCCL models it.

NCCL (src/graph/tuning.cc, `docs/reference/nccl-cost-model.md`) costs each (algorithm, protocol) as
`latency + bytes / bandwidth` and runs the cheapest; we do the same over ring, tree, NVLS and NVLS-tree with the
LL, LL128 and Simple protocols, using NCCL's default latencies. Bandwidths are not line rates: they are the
achievable nccl-tests bus bandwidths, i.e. the line rate of the group's bottleneck (from placement.py: NVLink
inside the domain, its share of NIC / leaf / pod / global egress outside) times the measured efficiencies below.

A group that spans NVLink domains with several members per domain runs hierarchically: NVLink hops inside each
domain and NIC hops between them. NCCL pipelines the two (its ring and NVLS-tree chunks flow through both at
once), so the bandwidth term is set by the slower fabric; `by_fabric` splits it in proportion to the time each
fabric is busy, and each fabric's latency goes to that fabric. Sizes follow nccl-tests: all_reduce the buffer,
reduce_scatter / all_gather the full array, all_to_all each rank's send buffer, send_recv one message.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .spec import ClusterSpec
from .topology import nic_gbytes_per_gpu, nvlink_gbytes_per_s, port_gbytes_per_s

if TYPE_CHECKING:
    from .placement import GroupPlacement

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv")

# --- Achievable bandwidth: nccl-tests bus bandwidth / line rate of one direction, large messages -----------
# Ring collectives inside an NVSwitch domain, busbw / one-direction NVLink: A100 232/300 (GTC24/25) and
# 234.9/300 (stas00), H100 370/450 (GTC24), H200 367.6/450 (stas00), B200 700/900 (GTC25), 32 GPUs of a GB200
# NVL72 680/900 (GTC25): 0.76-0.82, mean 0.79. The same fraction holds for reduce-scatter and all-gather
# (H200 362.9 and 361.4 against 367.2 for all-reduce, stas00).
NVLINK_RING_EFF = 0.79
# NVLS (NVSwitch SHARP) all-reduce: NCCL's nvlsEfficiency per generation (tuning.cc) ...
NVLS_EFF_HOPPER = 0.85
NVLS_EFF_BLACKWELL = 0.74
# ... times a scale to nccl-tests busbw fitted on H100 (8 GPUs, 480 GB/s; GTC24): 480 / (450 * 0.85).
# Checks: B200 900 * 0.74 * 1.255 = 836 against 850 (GTC25); H800 200 * 0.85 * 1.255 = 213 against ~215
# (SimAI constant, nccl #1374); H200 482 (stas00).
NVLS_SCALE = 1.255
# Scale-out rings, busbw / the group's NIC share at line rate: DGX A100 8x200 Gb/s 192/200, DGX H100 8x400 Gb/s
# 380/400, one 200 / 400 Gb/s RDMA NIC 24/25 and 48/50 (GTC24). TCP sockets: 100 GbE 10/12.5 (GTC24).
NET_RDMA_EFF = 0.95
NET_TCP_EFF = 0.80
# All-to-all inside an NVSwitch domain, busbw / one-direction NVLink: H100 320/450, A100 210/300, B200 640/900,
# GB200 NVL72 640/900 (GTC25).
A2A_NVLINK_EFF = 0.711
# All-to-all across nodes: measured busbw / the NIC-limited bound, GTC25 32 GPUs on 4 nodes: DGX H100 8x400 Gb/s
# 48, DGX A100 8x200 24, 2x400 12, 2x200 6 -- all 0.74 of (n - 1) / (g (n - g)) x node NIC bandwidth.
A2A_NET_EFF = 0.74
# Point-to-point over NVLink: A100 sendrecv 195.1 of 300 GB/s (li-plus/playground, nccl-tests sendrecv_perf).
P2P_NVLINK_EFF = 0.65
# NCCL protocol refinements (tuning.cc): Ring/LL min(llMaxBw, 0.5 busBw); Ring/LL128 0.92 busBw;
# Tree AllReduce Simple 0.92 busBw, Tree/LL busBw / 3.8, Tree/LL128 busBw * 120/128 across nodes.
LL_EFF = 0.5
LL128_EFF = 0.92
TREE_EFF = 0.92
TREE_LL_DIVISOR = 3.8
TREE_LL128_EFF = 120 / 128
# llMaxBw (GB/s): one node by GPU generation; across nodes (Intel CPUs) 39 for 2 nodes, 20.4 for 4 or more.
LL_MAX_BW = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}
LL_MAX_BW_2_NODES = 39.0
LL_MAX_BW_4_NODES = 20.4

# Mid-size messages: a collective streams at its plateau bandwidth only once every NCCL channel has its buffers
# in flight (16-32 channels x 4 MiB Simple buffers in 8 steps). Hockney's half-performance length n_1/2 of the
# nccl-tests curves, in bus bytes: A100 8-GPU all-reduce 16-27 MB from 16 MiB to 1 GiB (stas00: 106 of 235 GB/s
# at 16 MiB, 171 at 64 MiB, 229 at 1 GiB), H200 16-35 MB (242 of 480 at 16 MiB, 370 at 64 MiB). Streaming
# protocols (Simple, LL128) pay the fill once per call, n_1/2 x S / (S + n_1/2) bus bytes: NCCL runs fewer channels
# for small messages (enqueue.cc), so the fill never exceeds the message. LL is latency-bound already.
HALF_BANDWIDTH_BUS_BYTES = 24e6

# --- Latency (microseconds), NCCL defaults (ncclTunerConstantsDefaults) -----------------------------------
PROTOCOLS = ("LL", "LL128", "Simple")
BASE_LAT_US = {"ring": (6.6, 14.0, 8.4), "tree": (6.8, 14.0, 8.4)}
NVLINK_LAT_US = {"ring": (0.6, 1.9, 3.4), "tree": (0.6, 1.25, 4.0)}
NET_LAT_US = {"ring": (2.7, 4.0, 14.0), "tree": (5.0, 8.5, 14.0)}
NVLS_LAT_US = 25.0            # NVLS / NVLSTree on NVLink, Simple
NVLS_TREE_NET_LAT_US = 20.9   # NVLSTree on the network, Simple
NET_OVERHEAD_US = 1.0         # per network step, Intel CPUs (x3 for Simple)
RING_SIMPLE_PLATEAU = 1.4     # Ring/Simple multi-node all-reduce latency factor, Ampere and later (Volta 1.9)
RING_SIMPLE_PLATEAU_VOLTA = 1.9
# A training framework pays more per call than nccl-tests: H200 8-GPU all-reduce, torch-level benchmark against
# nccl-tests on the same machine, 39.8 vs 17.9 us at 32 KiB and 46 vs 25 us at 1 MiB (stas00).
LAUNCH_OVERHEAD_US = 20.0
# fabric.latency_us covers a path through one switch; each further switch adds this (assumed; hardware.md:
# InfiniBand NDR "~1 us, sub-us switch").
HOP_LATENCY_US = 0.2


@dataclass(frozen=True)
class CollectiveCost:
    time_s: np.ndarray                  # same shape as nbytes
    by_fabric: dict[str, np.ndarray]    # e.g. {"nvlink": ..., "infiniband": ...}; sums to time_s (the
                                        # per-call launch overhead counts on the group's outermost fabric)
    algorithm: str                      # chosen for the largest message: "ring", "hierarchical ring", "tree",
                                        # "hierarchical tree", "nvls", "nvls_tree", "direct" (all-to-all), "p2p"
    protocol: str = "Simple"            # NCCL protocol chosen for the largest message: LL, LL128, Simple
    nbytes: np.ndarray | None = None
    factor: float | np.ndarray = 1.0    # nccl-tests bus bandwidth factor of this op and group size (per
                                        # candidate when costed over several groups)
    # Per message (nbytes flattened), when costed over several groups: the algorithm it runs ("none" on a group
    # of one GPU) and the fabrics its cost reports, i.e. what `algorithm` and `by_fabric`'s keys would be for it
    # costed alone.
    algorithms: tuple[str, ...] = ()
    fabrics: tuple[frozenset, ...] = ()

    @property
    def busbw_gbytes_per_s(self) -> np.ndarray:
        """nccl-tests bus bandwidth (GB/s): bytes x factor / time."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.time_s > 0, self.nbytes * self.factor / self.time_s / 1e9, 0.0)


@dataclass(frozen=True)
class _Option:
    """One (algorithm, protocol): latency per fabric (us), seconds per byte, and each fabric's busy share."""

    algorithm: str
    protocol: str
    latency_us: dict[str, float]
    s_per_byte: float
    share: dict[str, float]
    factor: float = 1.0  # the op's bus factor, to turn HALF_BANDWIDTH_BUS_BYTES into algorithm bytes (inf: none)


def bus_factor(op: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor (doc/PERFORMANCE.md): busbw = algbw x factor."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n
    if op in ("send_recv", "broadcast", "reduce"):
        return 1.0
    raise ValueError(f"unknown collective {op!r} (known: {', '.join(OPS)})")


def generation(cluster: ClusterSpec) -> str:
    """NCCL keys some constants by GPU generation; the spec has none, so infer it from the NVLink generation:
    NVLink 5 (1,800 GB/s) Blackwell; NVLink 4 (900) or NVLink SHARP (H800: cut to 400) Hopper; NVLink 3 (600)
    Ampere; below, Volta."""
    nv = cluster.node.nvlink_gbytes_per_s
    if nv >= 1800:
        return "blackwell"
    if nv >= 900 or cluster.node.nvlink_sharp:
        return "hopper"
    return "ampere" if nv >= 600 else "volta"


def net_efficiency(kind: str) -> float:
    return NET_TCP_EFF if kind == "ethernet" else NET_RDMA_EFF


def nvlink_ring_busbw(cluster: ClusterSpec) -> float:
    """Ring bus bandwidth inside an NVLink domain (GB/s)."""
    return NVLINK_RING_EFF * nvlink_gbytes_per_s(cluster)


def nvls_busbw(cluster: ClusterSpec) -> float:
    """NVLS all-reduce bus bandwidth inside an NVLink domain (GB/s)."""
    eff = NVLS_EFF_BLACKWELL if generation(cluster) == "blackwell" else NVLS_EFF_HOPPER
    return nvlink_gbytes_per_s(cluster) * eff * NVLS_SCALE


def collective_time(op: str, nbytes: np.ndarray | float, group: GroupPlacement,
                    cluster: ClusterSpec) -> CollectiveCost:
    """Seconds for `op` on `group` moving `nbytes` (vectorised), argmin over algorithms and protocols."""
    _check_op(op)
    factor = bus_factor(op, max(1, group.size))
    size = _sizes(nbytes)
    if group.size <= 1:
        return CollectiveCost(np.zeros_like(size), {group.fabric: np.zeros_like(size)}, "none", "none", size, factor)
    return collective_costs(option_table(op, (group,), cluster), size, np.zeros(size.shape, dtype=np.intp), factor)


def collective_costs(table: OptionTable, nbytes: np.ndarray, which: np.ndarray,
                     factor: float | np.ndarray | None = None) -> CollectiveCost:
    """`table.op` for many candidates at once: candidate i moves nbytes[i] on group `which[i]` of `table`. The
    same arithmetic as one group at a time, on (candidate, option) arrays; a group of one GPU costs nothing.
    Neighbours with the same group and size are costed once (callers order candidates to make such runs)."""
    size = _sizes(nbytes)
    flat, rows = size.reshape(-1), np.broadcast_to(which, size.shape).reshape(-1)
    starts, run = _runs(flat, rows)
    time_s, by_fabric, best = _costs(table, flat[starts], rows[starts])
    active = table.active[rows]
    algorithm, protocol = table.largest(flat, rows, best[run], active)
    by_fabric = {f: t[run].reshape(size.shape) for f, t in by_fabric.items()}
    factor = table.factor[rows].reshape(size.shape) if factor is None else factor
    none = frozenset()
    algorithms = tuple(table.names[r][b][0] if a else "none" for r, b, a in zip(rows, best[run], active))
    fabrics = tuple(table.fabrics[r] if a else none for r, a in zip(rows, active))
    return CollectiveCost(time_s[run].reshape(size.shape), by_fabric, algorithm, protocol, size, factor,
                          algorithms, fabrics)


def _runs(flat: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First index of each run of equal (size, group) neighbours, and each candidate's run."""
    new = np.ones(len(flat), dtype=bool)
    new[1:] = (flat[1:] != flat[:-1]) | (rows[1:] != rows[:-1])
    return np.flatnonzero(new), np.cumsum(new) - 1


def collective_seconds(table: OptionTable, nbytes: np.ndarray, which: np.ndarray) -> np.ndarray:
    """Seconds per call of collective_costs alone (what ranking needs), without its split by fabric or the
    names of the chosen algorithm: the same arithmetic, for less."""
    flat = np.asarray(nbytes, dtype=float).reshape(-1)
    rows = np.broadcast_to(which, flat.shape)
    starts, run = _runs(flat, rows)
    time_s, _, _ = _times(table, flat[starts], rows[starts])
    return time_s[run]


def _times(table: OptionTable, flat: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seconds per call of each (size, group), argmin over options; the chosen option and its bandwidth term."""
    with np.errstate(divide="ignore", invalid="ignore"):
        half = table.half[rows]
        fill = np.where(half > 0, half * flat[:, None] / (flat[:, None] + half), 0.0)
    moved = (flat[:, None] + fill) * table.s_per_byte[rows]
    times = np.where(table.usable[rows], table.latency_us[rows] * 1e-6 + moved, np.inf)
    if not times.shape[1]:
        return np.zeros(len(flat)), np.zeros(len(flat), dtype=np.intp), np.zeros(len(flat))
    best = np.argmin(times, axis=1)
    pick = np.arange(len(flat)), best
    time_s = np.where(table.active[rows], times[pick] + LAUNCH_OVERHEAD_US * 1e-6, 0.0)
    return time_s, best, moved[pick]


def _costs(table: OptionTable, flat: np.ndarray, rows: np.ndarray
           ) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Seconds per call, seconds by fabric and the chosen option of each (size, group), argmin over options."""
    time_s, best, moved = _times(table, flat, rows)
    active = table.active[rows]
    launch = LAUNCH_OVERHEAD_US * 1e-6
    by_fabric = {}
    for fab in table.fabrics_of(rows[active]):
        col = table.columns[fab]
        t = (col.latency_us[rows, best] * 1e-6 + moved * col.share[rows, best]
             + np.where(table.outer[rows] == fab, launch, 0.0))
        by_fabric[fab] = np.where(active, t, 0.0)
    return time_s, by_fabric, best


def _check_op(op: str) -> None:
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r} (known: {', '.join(OPS)})")


def _sizes(nbytes: np.ndarray | float) -> np.ndarray:
    size = np.asarray(nbytes, dtype=float)
    if np.any(size < 0):
        raise ValueError("nbytes must be non-negative")
    return size


@dataclass(frozen=True)
class FabricColumn:
    """One fabric's part of every option: its latency (us) and its share of the bandwidth term."""

    latency_us: np.ndarray  # (groups, options)
    share: np.ndarray       # (groups, options)


@dataclass(frozen=True)
class OptionTable:
    """The (algorithm, protocol) options of `op` on several groups as (group, option) arrays, padded with
    unusable options: built once per distinct group (_options), evaluated for all candidates at once."""

    op: str
    active: np.ndarray          # (groups,) more than one member
    outer: np.ndarray           # (groups,) the group's outermost fabric (gets the launch overhead)
    factor: np.ndarray          # (groups,) nccl-tests bus factor
    usable: np.ndarray          # (groups, options) False for padding
    latency_us: np.ndarray      # (groups, options) summed over the fabrics
    s_per_byte: np.ndarray      # (groups, options)
    half: np.ndarray            # (groups, options) channel-fill half length in algorithm bytes, 0: none
    columns: dict[str, FabricColumn]
    fabrics: tuple[frozenset, ...]        # per group: the fabrics its cost reports (old by_fabric keys)
    names: tuple[tuple[tuple[str, str], ...], ...]  # per group and option: (algorithm, protocol)

    def fabrics_of(self, rows: np.ndarray) -> list[str]:
        """The fabrics any of these groups reports, sorted."""
        used = np.flatnonzero(np.bincount(rows, minlength=len(self.fabrics)))
        return sorted(set().union(*(self.fabrics[r] for r in used)))

    def largest(self, size: np.ndarray, rows: np.ndarray, best: np.ndarray, active: np.ndarray) -> tuple[str, str]:
        """Algorithm and protocol chosen for the largest message of an active group."""
        if not size.size:
            return self.names[0][0] if self.names and self.names[0] else ("none", "none")
        if not active.any():
            return "none", "none"
        i = int(np.argmax(np.where(active, size, -1.0)))
        return self.names[rows[i]][best[i]]


def option_table(op: str, groups: tuple[GroupPlacement, ...], cluster: ClusterSpec, memo: dict | None = None
                 ) -> OptionTable:
    """Tabulate `_options` of each group (a group of one GPU gets none). `memo` keeps them across calls on one
    cluster, where a group is fixed by its kind, stride and size."""
    _check_op(op)
    memo = {} if memo is None else memo
    options = [memo[key] if (key := (op, g.kind, g.stride, g.size)) in memo
               else memo.setdefault(key, _options(op, g, cluster) if g.size > 1 else []) for g in groups]
    width = max([len(o) for o in options] + [0])
    fabrics = ("nvlink", cluster.fabric.kind)
    grid = lambda f: np.array([[f(o) for o in opts] + [0.0] * (width - len(opts)) for opts in options],  # noqa: E731
                              dtype=float).reshape(len(groups), width)
    return OptionTable(
        op, np.array([g.size > 1 for g in groups], dtype=bool), np.array([g.fabric for g in groups], dtype=object),
        np.array([bus_factor(op, max(1, g.size)) for g in groups], dtype=float),
        grid(lambda o: 1.0).astype(bool), grid(lambda o: sum(o.latency_us.values())), grid(lambda o: o.s_per_byte),
        grid(_half),
        {f: FabricColumn(grid(lambda o, f=f: o.latency_us.get(f, 0.0)), grid(lambda o, f=f: o.share.get(f, 0.0)))
         for f in fabrics},
        tuple(_reported_fabrics(opts, g.fabric) for opts, g in zip(options, groups, strict=True)),
        tuple(tuple((o.algorithm, o.protocol) for o in opts) for opts in options))


def _half(o: _Option) -> float:
    """Channel fill of a streaming protocol in algorithm bytes (HALF_BANDWIDTH_BUS_BYTES); 0 for none."""
    if o.protocol not in ("Simple", "LL128") or not math.isfinite(o.factor):
        return 0.0
    return HALF_BANDWIDTH_BUS_BYTES / o.factor


def _reported_fabrics(options: list[_Option], outer: str) -> frozenset:
    """The fabrics a cost is split over: those with a bandwidth share or a latency in some option, and the outer."""
    return frozenset({f for o in options for f in o.share}
                     | {f for o in options for f, us in o.latency_us.items() if us > 0} | {outer})


def _options(op: str, group: GroupPlacement, cluster: ClusterSpec) -> list[_Option]:
    if op == "all_to_all":
        return [_all_to_all(group, cluster)]
    if op == "send_recv":
        return _send_recv(group, cluster)
    options = _ring(op, group, cluster)
    if op == "all_reduce":
        options += _tree(group, cluster) + _nvls(group, cluster)
    return options


def _fabric_latency_us(group: GroupPlacement, cluster: ClusterSpec) -> float:
    return cluster.fabric.latency_us + HOP_LATENCY_US * max(0, group.hops - 1)


def _ll_cap(group: GroupPlacement, cluster: ClusterSpec) -> float:
    if group.domains <= 1:
        return LL_MAX_BW[generation(cluster)]
    return LL_MAX_BW_2_NODES if group.domains <= 2 else LL_MAX_BW_4_NODES


def _fabric_bandwidths(group: GroupPlacement, cluster: ClusterSpec, net_scale: float = 1.0) -> dict[str, float]:
    """Achievable bus bandwidth of each fabric the group's ring uses (GB/s)."""
    bws = {}
    if group.per_domain > 1:
        bws["nvlink"] = group.nvlink_busbw_gbytes_per_s
    if group.domains > 1:
        bws[cluster.fabric.kind] = group.scaleout_busbw_gbytes_per_s * net_scale
    return bws


def _shares(busy: dict[str, float]) -> dict[str, float]:
    """Split the bandwidth term in proportion to each fabric's busy time."""
    total = sum(busy.values())
    return {f: b / total for f, b in busy.items()} if total > 0 else {f: 1 / len(busy) for f in busy}


def _split_latency(group: GroupPlacement, cluster: ClusterSpec, nvlink_us: float, net_us: float,
                   base_us: float) -> dict[str, float]:
    """NVLink steps to NVLink, network steps and NCCL's base latency to the scale-out fabric (if any)."""
    if group.domains <= 1:
        return {"nvlink": nvlink_us + base_us}
    return {"nvlink": nvlink_us, cluster.fabric.kind: net_us + base_us}


def _ring(op: str, group: GroupPlacement, cluster: ClusterSpec) -> list[_Option]:
    """Ring all-reduce / reduce-scatter / all-gather: 2(n-1) or n-1 steps, 2(k-1) or k-1 of them between
    domains (tuning.cc); bandwidth = the slower fabric's bus bandwidth, refined per protocol."""
    n, g, k = group.size, group.per_domain, group.domains
    ar = op == "all_reduce"
    steps, inter = (2 * (n - 1), 2 * (k - 1)) if ar else (n - 1, k - 1)
    bws = _fabric_bandwidths(group, cluster)
    bw = min(bws.values())
    share = _shares({f: 1 / b for f, b in bws.items()})
    fab_lat = _fabric_latency_us(group, cluster)
    plateau = RING_SIMPLE_PLATEAU_VOLTA if generation(cluster) == "volta" else RING_SIMPLE_PLATEAU
    name = "hierarchical ring" if g > 1 and k > 1 else "ring"
    out = []
    for p, proto in enumerate(PROTOCOLS):
        simple = proto == "Simple"
        intra = NVLINK_LAT_US["ring"][p]
        if k > 1:
            intra = max(intra, NET_OVERHEAD_US * (3 if simple else 1))
        row = "tree" if g == 1 else "ring"  # NCCL uses Tree's network latency when there is one rank per node
        inter_lat = NET_LAT_US[row][p] + fab_lat * (2 if simple else 1)  # Simple flushes: twice
        scale = plateau if (ar and k > 1 and simple) else 1.0
        lat = _split_latency(group, cluster, (steps - inter) * intra * scale, inter * inter_lat * scale,
                             BASE_LAT_US["ring"][p] * scale)
        proto_bw = {"LL": min(_ll_cap(group, cluster), LL_EFF * bw), "LL128": LL128_EFF * bw, "Simple": bw}[proto]
        out.append(_Option(name, proto, lat, bus_factor(op, n) / (proto_bw * 1e9), share, bus_factor(op, n)))
    return out


def _tree(group: GroupPlacement, cluster: ClusterSpec) -> list[_Option]:
    """NCCL double binary tree between domains, a chain inside each: all-reduce only, across domains only.
    Each node sends the buffer twice (reduce + broadcast) through its NICs, once with two nodes, so
    time = 2 S / bw (NCCL's algbw = busBw / 2), with the network's bandwidth doubled at k = 2."""
    g, k = group.per_domain, group.domains
    if k <= 1:
        return []
    bws = _fabric_bandwidths(group, cluster, net_scale=2.0 if k == 2 else 1.0)
    bw = min(bws.values())
    share = _shares({f: 1 / b for f, b in bws.items()})
    fab_lat = _fabric_latency_us(group, cluster)
    name = "hierarchical tree" if g > 1 else "tree"
    out = []
    for p, proto in enumerate(PROTOCOLS):
        simple = proto == "Simple"
        nv = 2 * (g - 1) * NVLINK_LAT_US["tree"][p]
        net = 2 * math.log2(k) * (NET_LAT_US["tree"][p] + fab_lat * (2 if simple else 1))
        lat = _split_latency(group, cluster, nv, net, BASE_LAT_US["tree"][p])
        proto_bw = {"LL": min(bw / TREE_LL_DIVISOR, _ll_cap(group, cluster)), "LL128": bw * TREE_LL128_EFF,
                    "Simple": TREE_EFF * bw}[proto]
        out.append(_Option(name, proto, lat, 2 / (proto_bw * 1e9), share, bus_factor("all_reduce", group.size)))
    return out


def _nvls(group: GroupPlacement, cluster: ClusterSpec) -> list[_Option]:
    """NVLS all-reduce in the NVSwitch (one domain), or NVLS-tree: NVLS inside each domain, a tree between
    domains (network bandwidth doubled with two domains); Simple protocol only."""
    g, k = group.per_domain, group.domains
    if not cluster.node.nvlink_sharp or g < 2:
        return []
    factor = bus_factor("all_reduce", group.size)
    intra = nvls_busbw(cluster)
    if k == 1:
        return [_Option("nvls", "Simple", {"nvlink": NVLS_LAT_US}, factor / (intra * 1e9), {"nvlink": 1.0}, factor)]
    net_bw = group.scaleout_busbw_gbytes_per_s * (2.0 if k <= 2 else 1.0)
    kind = cluster.fabric.kind
    net_lat = 2 * math.log2(k) * (NVLS_TREE_NET_LAT_US + 2 * _fabric_latency_us(group, cluster))
    share = _shares({"nvlink": 1 / intra, kind: 1 / net_bw})
    return [_Option("nvls_tree", "Simple", {"nvlink": NVLS_LAT_US, kind: net_lat},
                    factor / (min(intra, net_bw) * 1e9), share, factor)]


def _send_recv(group: GroupPlacement, cluster: ClusterSpec) -> list[_Option]:
    """One message to the neighbouring rank (pipeline stage, ring-attention hop). Across domains a transfer
    runs over the sending GPU's own NICs (NCCL picks the NIC nearest the GPU; at least one whole port)."""
    cross = group.domains > 1
    if cross:
        own = max(nic_gbytes_per_gpu(cluster), port_gbytes_per_s(cluster)) * net_efficiency(cluster.fabric.kind)
        bw, fab = min(group.scaleout_busbw_gbytes_per_s, own), cluster.fabric.kind
        cap = LL_MAX_BW_2_NODES
    else:
        bw, fab = P2P_NVLINK_EFF * nvlink_gbytes_per_s(cluster), "nvlink"
        cap = LL_MAX_BW[generation(cluster)]
    out = []
    for p, proto in enumerate(PROTOCOLS):
        simple = proto == "Simple"
        hw = (NET_LAT_US["tree"][p] + _fabric_latency_us(group, cluster) * (2 if simple else 1) if cross
              else NVLINK_LAT_US["ring"][p])
        proto_bw = {"LL": min(cap, LL_EFF * bw), "LL128": LL128_EFF * bw, "Simple": bw}[proto]
        # A point-to-point transfer streams through one or two channels: no multi-channel fill (n_1/2) term.
        out.append(_Option("p2p", proto, {fab: BASE_LAT_US["ring"][p] + hw}, 1 / (proto_bw * 1e9), {fab: 1.0},
                           float("inf")))
    return out


def _all_to_all(group: GroupPlacement, cluster: ClusterSpec) -> _Option:
    """Every rank sends S/n to each other rank at once. Through one unit's egress at each scale-out level, one
    group pushes m (n - m) / n x S (m = its members in the unit) over its share of that egress; each GPU pushes
    (g - 1) / n x S over its NVLink. The slowest of these sets the time (all run concurrently)."""
    n, g = group.size, group.per_domain
    busy = {}
    if g > 1:
        busy["nvlink"] = (g - 1) / n / (A2A_NVLINK_EFF * nvlink_gbytes_per_s(cluster) * 1e9)
    kind = cluster.fabric.kind
    for lv, egress in group.egress_gbytes_per_s.items():
        m = group.members_per_unit[lv]
        busy[kind] = max(busy.get(kind, 0.0), m * (n - m) / n / (A2A_NET_EFF * egress * 1e9))
    cross = group.domains > 1
    hw = (NET_LAT_US["ring"][2] + 2 * _fabric_latency_us(group, cluster)) if cross else NVLINK_LAT_US["ring"][2]
    lat = {kind if cross else "nvlink": BASE_LAT_US["ring"][2] + hw}
    return _Option("direct", "Simple", lat, max(busy.values()), _shares(busy), bus_factor("all_to_all", n))
