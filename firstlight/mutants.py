"""The race checker's score: every mutant of every kernel's stream, on the checker and on the RTL.

For each kernel of the registry at two shapes (its bring-up shape and its declared defaults), the
compiled stream (revision B1, the checker's model) and each of its mutants (interp.races.mutants:
a wait deleted, a signal deleted, a wait moved one command later) are

* checked by the happens-before checker (interp/races.py): flagged or not;
* run on the RTL in one simulator job per (kernel, shape) (firstlight/jobs/mutants.py): the
  output correct, corrupt, a hang (the watchdog, at twice the unmutated run's cycles) or an ERR.

The targets (issue 32): every mutant whose RTL run is not correct is flagged, and no unmutated
stream is. A flagged mutant whose RTL run was correct is a race that this one timing hid.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from cosim.build import Variant
from interp.races import apply_mutant, check_compiled, mutants
from kernels.tile.spec import registry
from rtl.board import BoardConfig
from rtl.config import ChipConfig

__all__ = ["Case", "cases", "score", "COLUMNS", "LEGEND"]

REVISION = "B1"


@dataclass
class Case:
    kernel: str
    params: dict
    commands: int = 0
    unmutated_flagged: list = field(default_factory=list)
    mutants: list = field(default_factory=list)  # (kind, index, flagged?, first finding or None)
    rtl: dict = field(default_factory=dict)  # (kind, index) -> outcome
    unmutated_rtl: str | None = None

    @property
    def label(self) -> str:
        from firstlight.jobs.tile import shape_label

        return f"{self.kernel} {shape_label(self.kernel, self.params)}"

    def row(self) -> dict:
        flagged = {(k, i) for k, i, f, _ in self.mutants if f}
        exposed = {key for key, o in self.rtl.items() if o != "correct"}
        every = {(k, i) for k, i, _, _ in self.mutants}
        return {"case": self.label, "commands": self.commands, "mutants": len(every), "flagged": len(flagged),
                "exposed": len(exposed), "flagged_exposed": len(flagged & exposed),
                "flagged_hidden": len(flagged - exposed), "missed": len(exposed - flagged),
                "unmutated_flagged": len(self.unmutated_flagged), "unmutated_rtl": self.unmutated_rtl,
                "missed_mutants": sorted(exposed - flagged)}


COLUMNS = [("case", "kernel, shape"), ("mutants", "mutants"), ("flagged", "flagged"), ("exposed", "RTL wrong"),
           ("flagged_exposed", "both"), ("flagged_hidden", "hidden"), ("missed", "missed"),
           ("unmutated_flagged", "false +")]
LEGEND = ("flagged: by the checker; RTL wrong: corrupt output, a hang or an ERR on the simulator; both: flagged and "
          "wrong; hidden: flagged, right on the RTL (a race this timing hid); missed: wrong on the RTL and not "
          "flagged (the target is 0); false +: the unmutated stream flagged (the target is 0)")


def cases(kernels: list[str] | None = None) -> list[Case]:
    """Two shapes per kernel: its first bring-up shape and its declared defaults (one, if equal)."""
    reg = registry()
    out = []
    for name in kernels or list(reg):
        spec = reg[name]
        shapes = []
        for p in [*(spec.bringup[:1] or ()), {}]:
            r = spec.resolve(dict(p))
            if r not in shapes:
                shapes.append(r)
        out += [Case(name, r) for r in shapes]
    return out


def score(todo: list[Case], *, sim: str = "verilator", seed: int = 1, sample: int | None = None,
          config: ChipConfig | None = None, on_case=None, on_mutant=None) -> list[Case]:
    """Check and run every case's mutants (a seeded ``sample`` of each case's, if given);
    ``on_case(case)`` once each is done, ``on_mutant()`` as each RTL run ends."""
    from cosim.jobs import run_job

    from .jobs.mutants import mutants_job

    config = config or ChipConfig()
    board = BoardConfig().resolve(config)
    rng = random.Random(seed)
    for c in todo:
        spec = registry()[c.kernel]
        compiled = spec.compile(c.params, config, board)
        c.commands = len(compiled.commands)
        c.unmutated_flagged = [str(f) for f in check_compiled(compiled, config, board)]
        every = mutants(compiled.commands)
        if sample is not None and sample < len(every):
            every = sorted(rng.sample(every, sample), key=lambda m: m[1])
        for kind, i in every:
            found = check_compiled(compiled, config, board, apply_mutant(compiled.commands, kind, i))
            c.mutants.append((kind, i, bool(found), str(found[0]) if found else None))
        res = run_job(mutants_job, {"kernel": c.kernel, "params": c.params, "seed": seed,
                                    "mutants": [[k, i] for k, i in every]},
                      variant=Variant(config=config, revision=REVISION), sim=sim,
                      on_record=(lambda r: on_mutant()) if on_mutant else None)
        v = res.value
        from .jobs.mutants import stream_sha

        if v["sha"] != stream_sha(compiled.commands):  # the mutants' indices would name other commands
            raise RuntimeError(f"{c.label}: the simulator process compiled another stream than this one "
                               f"({v['commands']} commands, {len(compiled.commands)} here)")
        c.unmutated_rtl = v["unmutated"]
        c.rtl = {(m["kind"], m["index"]): m["outcome"] for m in v["mutants"]}
        if on_case:
            on_case(c)
    return todo
