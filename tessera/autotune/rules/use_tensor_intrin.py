"""UseTensorIntrin: tile a block so its inner tile is a registered tensor intrinsic and tensorize
it (MetaSchedule's MultiLevelTilingWithIntrin, on CPU: the FMA GEMM micro-kernels, the VNNI dot).

For every intrinsic the target has the features of, the desc's iterators are mapped onto the
block's loops of the same kind -- its spatial iterators onto the block's last spatial loops, its
reduction iterators onto the last reduction loops, in order -- and each mapped loop is split so
that its inner part is the intrinsic's tile: by the desc's extent when it is constant, by a sampled
divisor (sample_categorical) when the desc leaves it symbolic (the GEMM kernels' K: the "kc" slice).
The first mapped spatial loop is split once more, by a sampled divisor of its tile count. The loops
are ordered as GotoBLAS/BLIS orders a GEMM (tessera.tir.schedule.examples.gemm):

    [unmapped spatial] [unmapped reduction] [reduction outers] s_0 [other spatial outers] s_1 | tile

e.g. k_0, i_0, j_0, i_1 | i_2, j_1, k_1; the outermost spatial loop of the nest runs in parallel
and the tile is tensorized. Tile sizes are sampled so the tile divides them (an intrinsic computes
whole tiles); an intrinsic whose tensorize does not match is skipped. Each matching intrinsic is one
design space, beside the block left for MultiLevelTiling.
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...ir import For, IntImm, structural_hash
from ...tir.tensor_intrin import TensorIntrin
from ...tir.tensor_intrin.intrin import pattern_of
from .base import (
    ANN_TILING,
    ScheduleRule,
    const_extent,
    divisors,
    node_of,
    trivial_binding_loops,
)


def _desc_loops(intrin):
    """[(iter_type, constant extent or None)] of the desc's block iterators, in its loop order."""
    s = pattern_of(intrin.desc, "desc", intrin.name)
    loops = []
    while type(s) is For:
        loops.append(s.loop_var)
        s = s.body
    block = s.block
    out = []
    for lv in loops:
        for iv, value in zip(block.iter_vars, s.iter_values):
            if value is lv:
                ext = iv.dom.extent
                out.append((iv.iter_type, ext.value if type(ext) is IntImm else None))
                break
        else:
            return None
    if len(out) != len(block.iter_vars):
        return None
    return out, block.writes[0].buffer.dtype if len(block.writes) == 1 else None


def slice_candidates(extent: int) -> list:
    """Divisors of a loop's extent for a symbolic tile (kc): multiples of 16 (the int8 kernels
    read k in quads), or the whole extent."""
    return [d for d in divisors(extent) if d % 16 == 0 or d == extent]


class UseTensorIntrin(ScheduleRule):
    """See the module docstring. intrinsics: names to try (default: every registered one but those
    a family made on first use)."""

    name = "UseTensorIntrin"

    def __init__(self, ctx, intrinsics=None):
        super().__init__(ctx)
        # intrinsics made on first use are left out: the design space must not depend on which
        # kernels this process happened to build before
        names = TensorIntrin.list(made=False) if intrinsics is None else list(intrinsics)
        self.intrins = []
        seen = set()  # one intrinsic registered under two names (TVM's "dot_16x4_vnni") is tried once
        for name in names:
            intrin = TensorIntrin.get(name)
            key = (intrin.c_functions, intrin.c_source, structural_hash(intrin.desc))
            if intrin.missing_features(ctx.target) or key in seen:
                continue
            seen.add(key)
            desc = _desc_loops(intrin)
            if desc is not None:
                self.intrins.append((intrin, *desc))

    def apply(self, sch, block) -> list:
        idx, r = node_of(sch, block)
        b = r.block
        if ANN_TILING in b.annotations or b.init is None or len(b.writes) != 1:
            return [sch]
        loops = trivial_binding_loops(idx, r)
        if loops is None:
            return [sch]
        kinds = [iv.iter_type for iv in b.iter_vars]
        out = []
        for intrin, desc, dtype in self.intrins:
            if dtype != b.writes[0].buffer.dtype:
                continue
            new = self._apply_one(sch, block, loops, kinds, intrin, desc)
            if new is not None:
                out.append(new)
        return out + [sch]

    def _apply_one(self, sch, block, loops, kinds, intrin, desc):
        s_idx = [k for k, t in enumerate(kinds) if t == "data_par"]
        r_idx = [k for k, t in enumerate(kinds) if t == "reduce"]
        d_s = [e for t, e in desc if t == "data_par"]
        d_r = [e for t, e in desc if t == "reduce"]
        if len(kinds) != len(s_idx) + len(r_idx) or len(d_s) > len(s_idx) or len(d_r) > len(r_idx) or not d_s:
            return None
        if d_s[0] is None:
            return None  # the first spatial tile is split further by a divisor of its count
        mapped = dict(zip(s_idx[len(s_idx) - len(d_s):], d_s))
        mapped.update(zip(r_idx[len(r_idx) - len(d_r):], d_r))
        for k, e in mapped.items():
            ext = const_extent(loops[k])
            if ext is None or (e is not None and ext % e):
                return None
        new = sch.copy()
        rvs = new.get_loops(block)
        first_s = s_idx[len(s_idx) - len(d_s)]
        unmapped_s = [rvs[k] for k in s_idx if k not in mapped]
        unmapped_r = [rvs[k] for k in r_idx if k not in mapped]
        red_outer, s_outer, tile = [], [], {}
        s0 = s1 = None
        try:
            for k, e in mapped.items():
                ext = const_extent(loops[k])
                if e is None:
                    cands = slice_candidates(ext)
                    e = new.sample_categorical(cands, [1.0 / len(cands)] * len(cands))
                if k == first_s:
                    cands = divisors(ext // mapped[k])
                    mid = new.sample_categorical(cands, [1.0 / len(cands)] * len(cands))
                    s0, s1, tile[k] = new.split(rvs[k], factors=[None, mid, e])
                elif kinds[k] == "data_par":
                    o, tile[k] = new.split(rvs[k], factors=[None, e])
                    s_outer.append(o)
                else:
                    o, tile[k] = new.split(rvs[k], factors=[None, e])
                    red_outer.append(o)
            tile_order = self._tile_order(desc, kinds, tile)
            new.reorder(*unmapped_s, *unmapped_r, *red_outer, s0, *s_outer, s1, *tile_order)
            new.parallel(unmapped_s[0] if unmapped_s else s0)
            new.tensorize(tile_order[0], intrin.name)
        except ScheduleError:
            return None
        return new

    @staticmethod
    def _tile_order(desc, kinds, tile) -> list:
        """The tile loops in the desc's loop order (its k-th spatial iterator is the k-th mapped
        spatial loop of the block, likewise for reductions)."""
        s_keys = sorted(k for k in tile if kinds[k] == "data_par")
        r_keys = sorted(k for k in tile if kinds[k] == "reduce")
        it_s, it_r = iter(s_keys), iter(r_keys)
        return [tile[next(it_s) if t == "data_par" else next(it_r)] for t, _ in desc]


__all__ = ["UseTensorIntrin", "slice_candidates"]
