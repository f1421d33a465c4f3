"""The section "CPU step time beside PyTorch": every peer-speed-<label>.json that
reports/peers/speed_torch.py wrote in the folder -> one table, a row per shape and kernel family:
both sides' step times (medians of the rounds), the median of the rounds' ratios with their range,
and issue 41's goal as the file judges it (speed_torch.py computes the verdict, once).
A folder without such files shows no section and lists nothing as missing (PyTorch is optional).
"""
from __future__ import annotations

from .document import Section, Table, fmt_ms
from .peers import model_shape

SPEED_KIND = "CPU step time beside PyTorch"  # the files' "kind" (speed_torch.py writes it)


def speed_rows(label: str, c: dict) -> list[list[str]]:
    m = c["config"]["model"]
    rows = []
    for f in c["families"]:
        env = ", ".join(f"{k}={v}" for k, v in f["env"].items()) or "none (each library's own choice)"
        ratios = f["ratio_per_round"]
        rows.append([f"{m['name']} ({model_shape(m)}), B={c['config']['batch']}", f["name"], env,
                     str(f["trainmem"].get("gemm") or "?"), fmt_ms(f["trainmem"]["step_ms_median"]),
                     fmt_ms(f["pytorch"]["step_ms_median"]),
                     f"{f['ratio']:.3f} ({min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} rounds)",
                     f"{'yes' if f['met'] else 'no'} (at most {f['at_most']})"])
    return rows


def speed_section(comparisons: dict[str, dict]) -> Section:
    rows = [row for label, c in comparisons.items() for row in speed_rows(label, c)]
    first = next(iter(comparisons.values()))
    cfg = first["config"]
    versions = sorted({f["pytorch"]["version"] for c in comparisons.values() for f in c["families"]})
    loads = [load[0] for c in comparisons.values() for load in c["machine"]["load_avg_per_round"]]
    s = Section("CPU step time beside PyTorch", [
        f"trainmem train --device cpu beside PyTorch {', '.join(versions)} (reports/peers/torch_train.py) on the same "
        f"model, tokens and AdamW, {cfg['threads']} threads each (PyTorch's OMP_WAIT_POLICY="
        f"{cfg.get('omp_wait_policy') or 'unset'}); trainmem --grads on-demand beside zero_grad(set_to_none=True). "
        "Each run's figure is the median of its steps after the warm-up; the rounds interleave the two programs "
        "(in alternating order) and the kernel families (the environment given to both). The ratio is the median of the rounds' ratios, "
        f"their range beside it; the goal is issue 41's. 1-minute load average {min(loads):.1f} to {max(loads):.1f} "
        f"at the rounds' starts on {first['machine']['cpu_cores']} cores: other work slows both sides."])
    s.tables.append(Table(["model", "kernel family", "environment", "trainmem's GEMM", "trainmem", "PyTorch",
                           "trainmem / PyTorch", "goal met?"], rows,
                          caption="Step time by kernel family (figures, not asserts: times depend on the machine)"))
    s.paragraphs.append("Commands: " + "; ".join(f"`{c['commands']['trainmem']}` beside `{c['commands']['pytorch']}`"
                                                 for c in comparisons.values()) + ".")
    return s
