"""The section "trainmem beside PyTorch": one comparison file written by reports/peers/compare_torch.py
(peer-torch-<label>.json) -> its tables. The renderer never imports torch; it reads the file.
A folder without such files shows no section and lists nothing as missing (the comparison is
optional, as PyTorch is).
"""
from __future__ import annotations

from .document import Section, Table, fmt_bytes, fmt_ms

CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "workspace", "data", "other")


def _ratio(x: float | None, y: float | None) -> str:
    return f"{x / y:.3f}" if x is not None and y else "-"


def peer_section(label: str, c: dict) -> Section:
    cfg, tm, pt = c["config"], c["trainmem"], c["pytorch"]
    m = cfg["model"]
    grads = "set_to_none=True (freed between steps)" if cfg["set_to_none"] else "set_to_none=False (kept, as trainmem)"
    s = Section(f"trainmem beside PyTorch: {label}", [
        f"{m['name']} (L={m['layers']} H={m['heads']} C={m['dim']} T={m['seq']} V={m['vocab']}, "
        f"{m['parameters']:,} parameters), batch {cfg['batch']}, {cfg['precision']}, the same tokens "
        f"(--data {cfg['data']}, seed {cfg['seed']}) and the same AdamW; PyTorch {pt['version']} with {grads}, "
        f"{pt['threads']} threads for both (OMP_WAIT_POLICY={cfg.get('omp_wait_policy') or 'unset'}). Step time: the median of {cfg['steps']} steps after {cfg['warmup']} "
        f"of warm-up, then the median of {cfg['rounds']} rounds run in turn (trainmem, PyTorch, trainmem, ...).",
        f"PyTorch's memory: {pt['memory_source']}; trainmem's: its caching allocator, the same run's peaks."
        + (f" Machine: {c['machine']['cpu_cores']} cores, 1-minute load average {c['machine']['load_avg_before'][0]:.1f}"
           f" before and {c['machine']['load_avg_after'][0]:.1f} after (other work slows both sides' times)."
           if "machine" in c else ""),
        f"Commands: `{c['commands']['trainmem']}` and `{c['commands']['pytorch']}`."])
    rows = [["peak allocated", fmt_bytes(tm["peak_allocated_bytes"]), fmt_bytes(pt["peak_allocated_bytes"]),
             _ratio(tm["peak_allocated_bytes"], pt["peak_allocated_bytes"])],
            ["peak reserved", fmt_bytes(tm["peak_reserved_bytes"]), fmt_bytes(pt.get("peak_reserved_bytes")),
             _ratio(tm["peak_reserved_bytes"], pt.get("peak_reserved_bytes"))]]
    rows += [[f"{cat} (peak)", fmt_bytes(tm["by_category"].get(cat)), fmt_bytes(pt["by_category"].get(cat)),
              _ratio(tm["by_category"].get(cat), pt["by_category"].get(cat))] for cat in CATEGORIES]
    rows += [["saved activations (one step)", fmt_bytes(tm["saved_activations"]["bytes"]),
              fmt_bytes(pt["saved_activations"]["bytes"]),
              _ratio(tm["saved_activations"]["bytes"], pt["saved_activations"]["bytes"])],
             ["step time (median)", fmt_ms(tm["step_ms_median"]), fmt_ms(pt["step_ms_median"]),
              _ratio(tm["step_ms_median"], pt["step_ms_median"])],
             ["loss, first step -> last", f"{tm['first_loss']:.4f} -> {tm['final_loss']:.4f}",
              f"{pt['first_loss']:.4f} -> {pt['final_loss']:.4f}", "-"]]
    s.tables.append(Table(["", "trainmem", "PyTorch", "trainmem / PyTorch"], rows,
                          caption="Memory by category (each category's own peak) and time"))
    saved = c["saved_activations"]
    s.tables.append(Table(
        ["part of the model", "trainmem", "PyTorch", "PyTorch's extras", "equal without the extras"],
        [[r["region"], f"{r['trainmem_bytes']:,} B", f"{r['pytorch_bytes']:,} B", f"{r['pytorch_extra_bytes']:,} B",
          "yes" if r["equal"] else "no"] for r in saved["by_region"]],
        caption="Tensors saved for backward, by the part of the model that made them (PyTorch: "
                "saved_tensors_hooks, one count per storage)"))
    kinds: dict[str, list[int]] = {}
    for t in saved["pytorch_extras"]:
        kinds.setdefault(t["why"], []).append(t["bytes"])
    s.paragraphs.append("PyTorch's extras: " + "; ".join(f"{len(b)} x {why} ({sum(b):,} B)" for why, b in kinds.items())
                        + "." if kinds else "PyTorch saves nothing that trainmem does not.")
    return s
