"""The guides' claims, each checked against the measured numbers of one results folder. A verdict
is computed from the numbers by the criterion written next to it: "holds", "does not hold", "not
measured" when the results it needs are absent, "not resolved at this noise" when a time difference
the criterion turns on is within the spread of the repetitions (noise.py states the rule), and "not
measurable on CPU" for a claim about hardware the CPU backend does not have (pinned host memory,
16-bit tensor cores): its numbers are shown, no verdict drawn. Nothing here knows the answer in
advance. A claim says one thing: the measured text says why it is not resolved only when that is its
verdict (noise_note), never beside "holds" or "does not hold".

The claims themselves are a suite's: each is declared in the suite's presentation file
(<folder>/<benchmark>_report.py, suites.py), with `@claim(text, SUITE, criterion)`. This module holds
what they share: the Claim, the verdicts and the helpers their checks use.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .noise import NOT_RESOLVED, why_unresolved
from .presentation import Suite, safe_split
from .results import Benchmark, ResultFolder
from .suites import presentation_modules, presentations

HOLDS, FAILS, NOT_MEASURED = "holds", "does not hold", "not measured"
NOT_MEASURABLE_ON_CPU = "not measurable on CPU"


@dataclass
class Claim:
    claim: str
    suite: str
    criterion: str
    verdict: str = NOT_MEASURED
    measured: str = ""
    numbers: dict[str, float] = field(default_factory=dict)


def claim(text: str, suite: Suite, criterion: str):
    """Declares a claim of `suite`: `check(folder, c)` fills in the Claim `c` from the folder's
    numbers (or leaves it "not measured"). Malformed numbers make it "not measured" with the reason."""
    def register(check):
        def run(folder: ResultFolder) -> Claim:
            c = Claim(text, suite.key, criterion)
            try:
                check(folder, c)
            except (TypeError, ValueError, ArithmeticError, KeyError, IndexError, AttributeError) as e:
                c.verdict, c.numbers = NOT_MEASURED, {}
                c.measured = f"results malformed: {type(e).__name__}: {e}"
            c.measured = _settle_noise_notes(c.measured, keep=c.verdict == NOT_RESOLVED)
            return c
        run.__name__ = check.__name__
        suite.claims.append(run)
        return run
    return register


def evaluate(folder: ResultFolder) -> list[Claim]:
    """Every claim against this folder: the suites' in their technique order, each suite's in the
    order its file declares them."""
    suites = sorted(presentations(), key=lambda s: s.technique_order)
    return [check(folder) for suite in suites for check in suite.claims]


def __getattr__(name: str):
    # A check or a helper of a suite's claims, by its name (`claims.zero_point(b)`, as the tests call
    # them): they are defined in the suites' presentation files.
    if not name.startswith("__"):
        for module in presentation_modules().values():
            if hasattr(module, name):
                return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def table(folder: ResultFolder, suite: Suite) -> dict[str, dict[str, Benchmark]]:
    """group -> setting -> benchmark, as the suite's presentation splits the names."""
    out: dict[str, dict[str, Benchmark]] = {}
    for b in folder.runs(suite.bench):
        group, setting = safe_split(suite, b)
        out.setdefault(group, {})[setting] = b
    return out


def verdict(ok: bool | None) -> str:
    """True: holds; False: does not hold; None: a time difference it needs is within the noise."""
    return NOT_RESOLVED if ok is None else (HOLDS if ok else FAILS)


def all_hold(oks: list[bool | None]) -> bool | None:
    """Every part must hold: one that fails fails the claim, else one not resolved leaves it unresolved."""
    if any(ok is False for ok in oks):
        return False
    return None if any(ok is None for ok in oks) else True


# A check writes its noise notes while it builds `measured`, before the claim's verdict is known, so
# each note is bracketed by this character (never kept in the text) until claim() settles it.
_NOTE = "\x00"


def noise_note(ok: bool | None, *cases: Benchmark) -> str:
    """" (not resolved at this noise: why)" after a comparison that is not resolved, else "". It is
    shown only if the claim's verdict is "not resolved at this noise": a claim that holds or does not
    hold (one part's failure decides it) says that alone."""
    if ok is not None:
        return ""
    return f"{_NOTE} ({why_unresolved(*cases).replace(_NOTE, '')}){_NOTE}"


def _settle_noise_notes(measured: str, keep: bool) -> str:
    """`measured` with its noise notes kept (unbracketed) or dropped."""
    return re.sub(f"{_NOTE}([^{_NOTE}]*){_NOTE}", r"\1" if keep else "", measured).replace(_NOTE, "")


def on_cpu(f: ResultFolder) -> bool:
    return f.device.get("kind") == "cpu"


def pct(a: float, b: float) -> float:
    """How much larger a is than b, in percent."""
    return 100.0 * (a / b - 1.0)
