"""The VDLA hardware configuration: data widths, GEMM core shape, on-chip buffer sizes and the
cycle model's constants. The default is VTA's "sim"/pynq configuration (vdla_spec.md, Parameters).

    cfg = VDLAConfig()                          # int8 x int8 -> int32, 1x16x16 GEMM, 32/256/128 KiB
    cfg = VDLAConfig(log_block=3)               # an 8x8 core; every derived size follows
    cfg.depth("inp"), cfg.elem_bytes("wgt")     # SRAM rows, bytes per row
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

from ...errors import TesseraError

# memory ids of LOAD/STORE (vdla_spec.md: UOP=0 WGT=1 INP=2 ACC=3 OUT=4 ACC_8BIT=5)
MEM_IDS = {"uop": 0, "wgt": 1, "inp": 2, "acc": 3, "out": 4, "acc8": 5}
MEM_NAMES = {v: k for k, v in MEM_IDS.items()}


class ConfigError(TesseraError):
    """A VDLA configuration that cannot describe hardware (bad widths, sizes that do not fit the ISA)."""


@dataclass(frozen=True)
class VDLAConfig:
    """One VDLA instance. Sizes are log2 (bits for widths, bytes for buffers) as VTA's
    vta_config.json; everything else (depths, index widths, row bytes) is derived."""

    log_inp_width: int = 3
    log_wgt_width: int = 3
    log_acc_width: int = 5
    log_batch: int = 0
    log_block: int = 4
    log_uop_buff_size: int = 15
    log_inp_buff_size: int = 15
    log_wgt_buff_size: int = 18
    log_acc_buff_size: int = 17
    # cycle model (vdla_spec.md, "Cycle-approximate model"): pynq's 64-bit AXI bus
    bus_bytes: int = 8              # DMA bytes per cycle
    dma_row_latency: int = 16       # cycles to set up one DMA row (burst)
    gemm_fill: int = 4              # GEMM pipeline fill per instruction
    alu_cycles_per_uop: int = 2     # the tensor ALU's initiation interval
    alu_fill: int = 4
    freq_mhz: int = 100

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"VDLAConfig.{f.name} must be a non-negative int, got {v!r}")
        if self.log_inp_width != 3 or self.log_wgt_width != 3 or self.log_acc_width != 5:
            raise ConfigError("VDLAConfig: the simulator implements int8 inputs/weights and int32 "
                              f"accumulators (log widths 3/3/5), got {self.log_inp_width}/"
                              f"{self.log_wgt_width}/{self.log_acc_width}")
        if self.bus_bytes < 1 or self.alu_cycles_per_uop < 1:
            raise ConfigError("VDLAConfig: bus_bytes and alu_cycles_per_uop must be >= 1")
        for buf in ("uop", "inp", "wgt", "acc"):
            if self.depth(buf) < 1:
                raise ConfigError(f"VDLAConfig: the {buf} buffer ({self.buffer_bytes(buf)} B) holds no "
                                  f"{self.elem_bytes(buf)}-byte row")

    # ---- derived shape -------------------------------------------------------------------------
    @property
    def batch(self) -> int:
        return 1 << self.log_batch

    @property
    def block(self) -> int:
        return 1 << self.log_block

    block_in = block_out = block

    @property
    def macs_per_cycle(self) -> int:
        return self.batch * self.block * self.block

    def elem_bytes(self, mem: str) -> int:
        """Bytes of one SRAM row (one tensor element of the intrinsics) of buffer `mem`."""
        b, n = self.batch, self.block
        per = {"uop": 4, "inp": b * n * (1 << self.log_inp_width) // 8,
               "wgt": n * n * (1 << self.log_wgt_width) // 8,
               "acc": b * n * (1 << self.log_acc_width) // 8,
               "out": b * n * (1 << self.log_inp_width) // 8,
               "acc8": b * n}
        if mem not in per:
            raise ConfigError(f"unknown VDLA memory {mem!r}; memories: {', '.join(per)}")
        return per[mem]

    def buffer_bytes(self, mem: str) -> int:
        log = {"uop": self.log_uop_buff_size, "inp": self.log_inp_buff_size,
               "wgt": self.log_wgt_buff_size, "acc": self.log_acc_buff_size,
               "out": self.log_acc_buff_size + self.log_inp_width - self.log_acc_width}
        if mem == "acc8":
            mem = "acc"
        if mem not in log:
            raise ConfigError(f"unknown VDLA memory {mem!r}")
        return 1 << log[mem]

    def depth(self, mem: str) -> int:
        """SRAM rows of buffer `mem` (out shares acc's indexing)."""
        if mem in ("out", "acc8"):
            mem = "acc"
        return self.buffer_bytes(mem) // self.elem_bytes(mem)

    def idx_bits(self, mem: str) -> int:
        """Bits of a row index into `mem` (micro-op fields, factors)."""
        return max(1, (self.depth(mem) - 1).bit_length())

    @property
    def peak_gops(self) -> float:
        return 2 * self.macs_per_cycle * self.freq_mhz / 1e3

    # ---- serialization -------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @staticmethod
    def from_dict(d: dict) -> "VDLAConfig":
        names = {f.name for f in fields(VDLAConfig)}
        unknown = set(d) - names
        if unknown:
            raise ConfigError(f"unknown VDLAConfig keys {sorted(unknown)}; keys: {sorted(names)}")
        return VDLAConfig(**d)

    def describe(self) -> str:
        rows = [f"VDLA {self.batch}x{self.block}x{self.block} GEMM core (int8 x int8 -> int32), "
                f"{self.macs_per_cycle} MAC/cycle, {self.peak_gops:.1f} GOPS @ {self.freq_mhz} MHz"]
        for m in ("uop", "inp", "wgt", "acc", "out"):
            rows.append(f"  {m:<4} {self.buffer_bytes(m) // 1024:>4} KiB  {self.depth(m):>5} rows x "
                        f"{self.elem_bytes(m)} B")
        return "\n".join(rows)


DEFAULT_CONFIG = VDLAConfig()
