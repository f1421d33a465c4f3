"""The section "trainmem beside PyTorch": one comparison file written by reports/peers/compare_torch.py
(peer-torch-<label>.json) -> its tables: issue 18's goals, each pairing's figures (trainmem's
--grads beside the PyTorch zero_grad(set_to_none=...) that does the same), the saved activations.
The renderer never imports torch; it reads the file, and shows the goals' verdicts as the file
gives them (compare_torch.py computes them, once).
A folder without such files shows no section and lists nothing as missing (the comparison is
optional, as PyTorch is).
"""
from __future__ import annotations

from . import result_schema
from .document import Section, Table, fmt_bytes, fmt_ms

# The categories both sides have: trainmem's but communication (one PyTorch process moves no bytes).
CATEGORIES = tuple(c for c in result_schema.CATEGORIES if c != "communication")
GOAL_FORMAT = {result_schema.PEAK_ALLOCATED: fmt_bytes, "step_ms_median": fmt_ms}  # a goal's measure -> its format


def _ratio(x: float | None, y: float | None) -> str:
    return f"{x / y:.3f}" if x is not None and y else "-"


def _row(what: str, tm: float | None, pt: float | None, fmt=fmt_bytes) -> list[str]:
    return [what, fmt(tm), fmt(pt), _ratio(tm, pt)]


def goals_table(goals: list[dict]) -> Table:
    rows = [[g["goal"], GOAL_FORMAT[g["measure"]](g["trainmem"]), GOAL_FORMAT[g["measure"]](g["pytorch"]),
             "-" if g["ratio"] is None else f"{g['ratio']:.3f}", "yes" if g["met"] else "no"] for g in goals]
    return Table(["goal", "trainmem", "PyTorch", "trainmem / PyTorch", "met?"], rows,
                 caption="Issue 18's goals, measured (figures, not asserts: times depend on the machine's load)")


def pairing_table(tm: dict, pt: dict) -> Table:
    """One pairing: both sides' memory by category, what a step leaves for the next, time, loss."""
    rows = [_row("peak allocated", tm[result_schema.PEAK_ALLOCATED], pt[result_schema.PEAK_ALLOCATED]),
            _row("peak reserved", tm[result_schema.PEAK_RESERVED], pt.get(result_schema.PEAK_RESERVED))]
    rows += [_row(f"{cat} (peak)", tm["by_category"].get(cat), pt["by_category"].get(cat)) for cat in CATEGORIES]
    rows += [_row("held between steps", tm["held_between_steps"]["allocated_bytes"],
                  pt["held_between_steps"]["allocated_bytes"]),
             _row("gradients held between steps", tm["held_between_steps"]["gradients_bytes"],
                  pt["held_between_steps"]["gradients_bytes"]),
             _row("step time (median)", tm["step_ms_median"], pt["step_ms_median"], fmt_ms),
             ["loss, first step -> last", f"{tm['first_loss']:.4f} -> {tm['final_loss']:.4f}",
              f"{pt['first_loss']:.4f} -> {pt['final_loss']:.4f}", "-"]]
    return Table(["", "trainmem", "PyTorch", "trainmem / PyTorch"], rows,
                 caption=f"trainmem --grads {tm['grads']} beside PyTorch zero_grad(set_to_none={pt['set_to_none']}): "
                         "each category's own peak, what one step leaves for the next, time")


def saved_table(saved: dict) -> Table:
    rows = [[r["region"], f"{r['trainmem_bytes']:,} B", f"{r['pytorch_bytes']:,} B", f"{r['pytorch_extra_bytes']:,} B",
             "yes" if r["equal"] else "no"] for r in saved["by_region"]]
    rows.append(["all", f"{saved['trainmem']['bytes']:,} B", f"{saved['pytorch']['bytes']:,} B",
                 f"{sum(t['bytes'] for t in saved['pytorch_extras']):,} B", "yes" if saved["equal"] else "no"])
    return Table(["part of the model", "trainmem", "PyTorch", "PyTorch's extras", "equal without the extras"], rows,
                 caption="Tensors saved for backward in one step, by the part of the model that made them "
                         "(PyTorch: saved_tensors_hooks, one count per storage)")


def machine_line(machine: dict) -> str:
    rounds = [load[0] for load in machine["load_avg_per_round"]]
    return (f"Machine: {machine['cpu_cores']} cores; 1-minute load average {machine['load_avg_before'][0]:.1f} before, "
            f"{min(rounds):.1f} to {max(rounds):.1f} at the start of the rounds, {machine['load_avg_after'][0]:.1f} "
            "after (other work slows both sides' times; memory figures do not depend on it).")


def model_shape(m: dict) -> str:
    """The family and shape as trainmem prints them (ModelConfig::shape_summary): "gpt: L=2 H=4 C=64 T=64
    V=256"; a Llama adds its K/V heads and SwiGLU width, "llama: L=2 H=4 Hkv=2 C=64 F=176 T=64 V=256"."""
    arch = m.get("arch", "gpt")
    llama = arch == "llama"
    return (f"{arch}: L={m['layers']} H={m['heads']}" + (f" Hkv={m['kv_heads']}" if llama else "") + f" C={m['dim']}"
            + (f" F={m['ffn_dim']}" if llama else "") + f" T={m['seq']} V={m['vocab']}")


def peer_section(label: str, c: dict) -> Section:
    cfg, pairings = c["config"], c["pairings"]
    m = cfg["model"]
    first = next(iter(pairings.values()))
    s = Section(f"trainmem beside PyTorch: {label}", [
        f"{m['name']} ({model_shape(m)}, {m['parameters']:,} parameters), batch {cfg['batch']}, {cfg['precision']}, the same tokens "
        f"(--data {cfg['data']}, seed {cfg['seed']}) and the same AdamW; PyTorch {first['pytorch']['version']}, "
        f"{first['pytorch']['threads']} threads for both (OMP_WAIT_POLICY={cfg.get('omp_wait_policy') or 'unset'}). "
        f"Step time: the median of {cfg['steps']} steps after {cfg['warmup']} of warm-up, then the median of "
        f"{cfg['rounds']} rounds; each round runs every pairing, trainmem then PyTorch.",
        f"PyTorch's memory: {first['pytorch']['memory_source']}; trainmem's: its caching allocator, the same run's "
        "peaks. Held between steps: trainmem's allocated bytes after its last step, PyTorch's tensors alive "
        "when its measured step starts.",
        machine_line(c["machine"])])
    s.tables.append(goals_table(c["goals"]))
    for p in pairings.values():
        s.tables.append(pairing_table(p["trainmem"], p["pytorch"]))
    s.tables.append(saved_table(c["saved_activations"]))
    kinds: dict[str, list[int]] = {}
    for t in c["saved_activations"]["pytorch_extras"]:
        kinds.setdefault(t["why"], []).append(t["bytes"])
    s.paragraphs.append("PyTorch's extras: " + "; ".join(f"{len(b)} x {why} ({sum(b):,} B)" for why, b in kinds.items())
                        + "." if kinds else "PyTorch saves nothing that trainmem does not.")
    s.paragraphs.append("Commands: " + "; ".join(f"`{p['commands']['trainmem']}` beside `{p['commands']['pytorch']}`"
                                                 for p in pairings.values()) + ".")
    return s
