"""The two vocabularies every row shares: a row's Status and the Pass it timed.

Both are StrEnums whose values are the strings committed results.jsonl files already hold, so a
member compares equal to its string (`Status.OK == "ok"`) and serialises as that string.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    OK = "ok"
    OOM = "oom"
    UNSUPPORTED = "unsupported"  # the provider or strategy refuses this workload (bad input, no kernel)
    UNAVAILABLE = "unavailable"  # its package, hardware or world size is missing here
    INCORRECT = "incorrect"  # ran, but disagrees with the fp32 reference
    ERROR = "error"
    # not attempted, with the reason (a series stopped after an OOM at a shorter length, or a profile's
    # time budget); never a measurement
    SKIPPED = "skipped"

    def __repr__(self) -> str:
        # as the plain string it replaces, so printed lists and dicts of statuses read as before
        return repr(self.value)

    @classmethod
    def parse(cls, value: str) -> Status:
        """The member spelled `value`, or a ValueError naming the known spellings."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"status {value!r} is not one of {[s.value for s in cls]}") from None

    @property
    def severity(self) -> int:
        """How bad a failed step is, so ranks can agree on the worst one with a MAX all-reduce."""
        return _SEVERITY.index(self) if self in _SEVERITY else len(_SEVERITY)


# the outcomes a distributed step can agree on, best first (context parallel and dilated attention)
_SEVERITY = (Status.OK, Status.OOM, Status.UNSUPPORTED, Status.ERROR)


def status_of_severity(severity: int) -> Status:
    """The Status a MAX all-reduce of `Status.severity` values agreed on."""
    return _SEVERITY[severity]


class Pass(StrEnum):
    FWD = "fwd"
    BWD = "bwd"
    FWD_BWD = "fwd_bwd"

    def __repr__(self) -> str:
        return repr(self.value)

    @classmethod
    def parse(cls, value: str) -> Pass:
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"pass {value!r} is not one of {[p.value for p in cls]}") from None

    @property
    def title(self) -> str:
        return _TITLES[self]

    @property
    def flop_multiplier(self) -> float:
        """Matmul FLOPs of this pass over the forward's: the backward does 2.5 forwards' worth (dQ, dK,
        dV and the recomputed scores), forward + backward 3.5."""
        return _FLOP_MULTIPLIERS[self]


_TITLES = {Pass.FWD: "forward", Pass.BWD: "backward", Pass.FWD_BWD: "forward + backward"}
_FLOP_MULTIPLIERS = {Pass.FWD: 1.0, Pass.BWD: 2.5, Pass.FWD_BWD: 3.5}

STATUSES = tuple(s.value for s in Status)
PASSES = tuple(p.value for p in Pass)
PASS_TITLES = {p.value: p.title for p in Pass}
