"""The claim fence of one stage (docs/rules.md §8): pure rules plus a thin store.

A stage keeps at most one accepted coordinator claim per model artifact, the key
``(model_id, package_ref, manifest_sha256)``. :func:`decide_claim` and
:func:`decide_load` are the whole rule set as pure functions of the stored claim,
the incoming request and the stage's clock; :class:`ClaimFence` only stores what
they accept.

Empty strings are legal field values here: "missing" is a reason a claim is
rejected, not malformed input. Malformed input (a term that is not an integer, a
negative term, unknown fields) raises :class:`~planner.fence.errors.InvalidFenceInput`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Self

from planner._validate import integer
from planner.fence.errors import InvalidFenceInput, bad_input

ClaimKey = tuple[str, str, str]

# Reason codes, exactly as docs/rules.md §8 names them.
MISSING_MODEL_ID = "MissingModelId"
MISSING_PACKAGE_REF = "MissingPackageRef"
MISSING_MANIFEST_SHA256 = "MissingManifestSha256"
MISSING_TOPOLOGY_RUN = "MissingTopologyRun"
MISSING_COORDINATOR_ID = "MissingCoordinatorId"
MISSING_TERM = "MissingTerm"
MISSING_HASHES = "MissingHashes"
EXPIRED_LEASE = "ExpiredLease"
STALE_TERM = "StaleTerm"
CONFLICTING_SAME_TERM = "ConflictingSameTerm"
MISSING_CLAIM = "MissingClaim"
TERM_MISMATCH = "TermMismatch"
COORDINATOR_MISMATCH = "CoordinatorMismatch"
TOPOLOGY_RUN_MISMATCH = "TopologyRunMismatch"

CLAIM_REASONS: tuple[str, ...] = (
    MISSING_MODEL_ID,
    MISSING_PACKAGE_REF,
    MISSING_MANIFEST_SHA256,
    MISSING_TOPOLOGY_RUN,
    MISSING_COORDINATOR_ID,
    MISSING_TERM,
    MISSING_HASHES,
    EXPIRED_LEASE,
    STALE_TERM,
    CONFLICTING_SAME_TERM,
)
# The checks that can decide, in the order docs/rules.md §8 applies them. A decision
# names the one that decided in its ``rule``, so a drawing of the rules (or a log)
# shows the branch taken without re-deriving it from the reason.
RULE_SHAPE = "shape"
RULE_FIRST_CLAIM = "first_claim"
RULE_STALE_TERM = "stale_term"
RULE_NEWER_TERM = "newer_term"
RULE_SAME_EPOCH = "same_epoch"
CLAIM_RULES: tuple[str, ...] = (RULE_SHAPE, RULE_FIRST_CLAIM, RULE_STALE_TERM, RULE_NEWER_TERM,
                                RULE_SAME_EPOCH)
RULE_UNFENCED = "unfenced"
RULE_FENCED_FIELDS = "fenced_fields"
RULE_CLAIM_EXISTS = "claim_exists"
RULE_MATCH = "match"
RULE_LEASE = "lease"
LOAD_RULES: tuple[str, ...] = (RULE_UNFENCED, RULE_FENCED_FIELDS, RULE_CLAIM_EXISTS,
                               RULE_MATCH, RULE_LEASE)

LOAD_REASONS: tuple[str, ...] = (
    MISSING_TERM,
    MISSING_COORDINATOR_ID,
    MISSING_CLAIM,
    TERM_MISMATCH,
    COORDINATOR_MISMATCH,
    TOPOLOGY_RUN_MISMATCH,
    EXPIRED_LEASE,
)


MAX_FENCE_INT = 2**63 - 1
"""Terms and times are what a 64-bit store holds; anything larger is refused."""


def require_str(value: Any, name: str, where: str, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        expected = "must be a string or null" if optional else "must be a string"
        raise InvalidFenceInput(name, expected, value=value, where=where)


def fence_int(value: Any, name: str, where: str, *, minimum: int | None = None) -> int:
    """``value`` as an ``int`` within what the fence stores (terms, milliseconds)."""
    return integer(value, bad_input(name, where), minimum=minimum, maximum=MAX_FENCE_INT)


def fields_from_dict(cls: type, data: Mapping[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise InvalidFenceInput("(whole)", "must be a mapping of field names", value=data,
                                where=where)
    names = [f.name for f in fields(cls)]
    for key in data:
        if key not in names:
            raise InvalidFenceInput(str(key), f"unknown field; expected {', '.join(names)}",
                                    where=where)
    missing = [name for name in names if name not in data]
    if missing:
        raise InvalidFenceInput(missing[0], "is required", where=where)
    return {name: data[name] for name in names}


@dataclass(frozen=True, slots=True)
class CoordinatorClaim:
    """A coordinator's request to own one split generation of a model artifact."""

    model_id: str
    package_ref: str
    manifest_sha256: str
    topology_id: str
    run_id: str
    coordinator_id: str
    coordinator_term: int
    participant_set_hash: str
    topology_hash: str
    lease_until_unix_ms: int

    def __post_init__(self) -> None:
        where = "claim"
        for name in ("model_id", "package_ref", "manifest_sha256", "topology_id", "run_id",
                     "coordinator_id", "participant_set_hash", "topology_hash"):
            require_str(getattr(self, name), name, where)
        object.__setattr__(self, "coordinator_term",
                           fence_int(self.coordinator_term, "coordinator_term", where,
                                     minimum=0))
        object.__setattr__(self, "lease_until_unix_ms",
                           fence_int(self.lease_until_unix_ms, "lease_until_unix_ms", where))

    @property
    def key(self) -> ClaimKey:
        return (self.model_id, self.package_ref, self.manifest_sha256)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CoordinatorClaim:
        return cls(**fields_from_dict(cls, data, "claim"))


@dataclass(frozen=True, slots=True)
class GenerationRef:
    """One split generation of one model artifact, as a load, a stop or running work
    names it: the artifact key, topology and run, and the coordinator and term.

    ``coordinator_term == 0`` with no coordinator id (``None`` or ``""``) is unfenced
    local or legacy work.
    """

    model_id: str
    package_ref: str
    manifest_sha256: str
    topology_id: str
    run_id: str
    coordinator_id: str | None
    coordinator_term: int

    kind: ClassVar[str] = "generation"
    """How error messages name the value (``load.coordinator_term``)."""

    def __post_init__(self) -> None:
        for name in ("model_id", "package_ref", "manifest_sha256", "topology_id", "run_id"):
            require_str(getattr(self, name), name, self.kind)
        require_str(self.coordinator_id, "coordinator_id", self.kind, optional=True)
        object.__setattr__(self, "coordinator_term",
                           fence_int(self.coordinator_term, "coordinator_term", self.kind,
                                     minimum=0))

    @property
    def key(self) -> ClaimKey:
        return (self.model_id, self.package_ref, self.manifest_sha256)

    @property
    def has_coordinator(self) -> bool:
        return bool(self.coordinator_id)

    @property
    def is_unfenced(self) -> bool:
        """Term 0 and no coordinator id: outside the fence."""
        return self.coordinator_term == 0 and not self.has_coordinator

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls(**fields_from_dict(cls, data, cls.kind))

    @classmethod
    def for_claim(cls, claim: CoordinatorClaim) -> Self:
        """The generation a claim names (what its coordinator loads or stops)."""
        return cls(
            model_id=claim.model_id,
            package_ref=claim.package_ref,
            manifest_sha256=claim.manifest_sha256,
            topology_id=claim.topology_id,
            run_id=claim.run_id,
            coordinator_id=claim.coordinator_id,
            coordinator_term=claim.coordinator_term,
        )

    @classmethod
    def of(cls, other: GenerationRef) -> Self:
        """The same generation as another kind of reference."""
        require_instance(other, GenerationRef, "other")
        return cls(**{f.name: getattr(other, f.name) for f in fields(GenerationRef)})


@dataclass(frozen=True, slots=True)
class LoadClaimRef(GenerationRef):
    """The claim a ``LoadStage`` request says it is authorised by."""

    kind: ClassVar[str] = "load"


def same_claim_epoch(a: CoordinatorClaim, b: CoordinatorClaim) -> bool:
    """Same key, term, topology, run, coordinator and both hashes; the lease may differ."""
    require_instance(a, CoordinatorClaim, "a")
    require_instance(b, CoordinatorClaim, "b")
    return (
        a.key == b.key
        and a.coordinator_term == b.coordinator_term
        and a.topology_id == b.topology_id
        and a.run_id == b.run_id
        and a.coordinator_id == b.coordinator_id
        and a.participant_set_hash == b.participant_set_hash
        and a.topology_hash == b.topology_hash
    )


def _epoch_differences(current: CoordinatorClaim, claim: CoordinatorClaim) -> list[str]:
    names = ("topology_id", "run_id", "coordinator_id", "participant_set_hash", "topology_hash")
    return [
        f"{name} {getattr(claim, name)!r} vs stored {getattr(current, name)!r}"
        for name in names
        if getattr(claim, name) != getattr(current, name)
    ]


@dataclass(frozen=True, slots=True)
class ClaimDecision:
    """What a stage answers to ``ClaimCoordinator``.

    ``current`` is the stored claim the request was judged against (``None`` when
    there was none, and for shape rejections, which never consult the store).
    ``claim`` and ``now_unix_ms`` are the request and the stage's clock, kept so the
    decision can explain itself. ``rule`` is the check that decided (one of
    :data:`CLAIM_RULES`; ``None`` for a decision not made by :func:`decide_claim`).
    """

    accepted: bool
    reason: str | None
    supersedes_term: int | None
    current: CoordinatorClaim | None
    claim: CoordinatorClaim | None = None
    now_unix_ms: int | None = None
    rule: str | None = None

    @property
    def current_term(self) -> int | None:
        return None if self.current is None else self.current.coordinator_term

    @property
    def claim_term(self) -> int | None:
        """The term of the claim that was judged."""
        return None if self.claim is None else self.claim.coordinator_term

    @property
    def message(self) -> str:
        claim = self.claim
        term = "?" if claim is None else claim.coordinator_term
        if self.accepted:
            if self.supersedes_term is not None:
                return f"accepted term {term}, superseding term {self.supersedes_term}"
            if self.current is not None:
                return f"accepted term {term} again: same epoch, lease renewed"
            return f"accepted term {term}: first claim for this model artifact"
        return _claim_rejection_message(self.reason, claim, self.current, self.now_unix_ms)

    def to_dict(self) -> dict[str, Any]:
        """Plain data; ``claim_term`` and ``current_term`` are both terms (docs/rules.md §8:
        a ``StaleTerm`` reports both terms and the current claim)."""
        return {
            "accepted": self.accepted,
            "reason": self.reason,
            "rule": self.rule,
            "supersedes_term": self.supersedes_term,
            "claim_term": self.claim_term,
            "current_term": self.current_term,
            "current": None if self.current is None else self.current.to_dict(),
            "message": self.message,
        }


def _claim_rejection_message(
    reason: str | None,
    claim: CoordinatorClaim | None,
    current: CoordinatorClaim | None,
    now: int | None,
) -> str:
    simple = {
        MISSING_MODEL_ID: "rejected: the claim has no model_id",
        MISSING_PACKAGE_REF: "rejected: the claim has no package_ref",
        MISSING_MANIFEST_SHA256: "rejected: the claim has no manifest_sha256",
        MISSING_TOPOLOGY_RUN: "rejected: the claim has no topology_id or no run_id",
        MISSING_COORDINATOR_ID: "rejected: the claim has no coordinator_id",
        MISSING_TERM: "rejected: coordinator term 0 is not a fencing term",
        MISSING_HASHES: "rejected: the claim has no participant_set_hash or no topology_hash",
    }
    if reason in simple:
        return simple[reason]
    if reason == EXPIRED_LEASE and claim is not None:
        return (f"rejected: lease already expired (lease until {claim.lease_until_unix_ms} "
                f"<= stage clock {now})")
    if reason == STALE_TERM and claim is not None and current is not None:
        return f"stale coordinator term {claim.coordinator_term} < {current.coordinator_term}"
    if reason == CONFLICTING_SAME_TERM and claim is not None and current is not None:
        differs = "; ".join(_epoch_differences(current, claim))
        return f"conflicting claim for the same term {claim.coordinator_term}: {differs}"
    return f"rejected: {reason}"


@dataclass(frozen=True, slots=True)
class LoadDecision:
    """What a stage answers to ``LoadStage``.

    ``current`` is the stored claim the load was checked against, ``load`` and
    ``now_unix_ms`` the request and the stage's clock (kept for the message).
    ``rule`` is the check that decided (one of :data:`LOAD_RULES`; ``None`` for a
    decision not made by :func:`decide_load`).
    """

    accepted: bool
    reason: str | None
    unfenced: bool
    current: CoordinatorClaim | None = None
    load: LoadClaimRef | None = None
    now_unix_ms: int | None = None
    rule: str | None = None

    @property
    def current_term(self) -> int | None:
        return None if self.current is None else self.current.coordinator_term

    @property
    def load_term(self) -> int | None:
        """The term the load carries."""
        return None if self.load is None else self.load.coordinator_term

    @property
    def claim_term(self) -> int | None:
        """The term of the stored claim the load was checked against."""
        return self.current_term

    @property
    def message(self) -> str:
        load, current = self.load, self.current
        if self.accepted:
            if self.unfenced:
                return "accepted unfenced: term 0 and no coordinator id bypass the fence"
            term = "?" if load is None else load.coordinator_term
            return f"accepted load for term {term}"
        reason = self.reason
        if reason == MISSING_TERM:
            return "rejected: a load with a coordinator id needs a non-zero term"
        if reason == MISSING_COORDINATOR_ID:
            return "rejected: a fenced load (term > 0) needs a coordinator id"
        if reason == MISSING_CLAIM:
            return "rejected: no accepted claim for this model artifact"
        if load is not None and current is not None:
            if reason == TERM_MISMATCH:
                return (f"rejected: load term {load.coordinator_term} != claim term "
                        f"{current.coordinator_term}")
            if reason == COORDINATOR_MISMATCH:
                return (f"rejected: load from coordinator {load.coordinator_id!r}, claim held "
                        f"by {current.coordinator_id!r}")
            if reason == TOPOLOGY_RUN_MISMATCH:
                return (f"rejected: load for {load.topology_id!r}/{load.run_id!r}, claim is for "
                        f"{current.topology_id!r}/{current.run_id!r}")
            if reason == EXPIRED_LEASE:
                return (f"rejected: lease expired (lease until {current.lease_until_unix_ms} "
                        f"< stage clock {self.now_unix_ms})")
        return f"rejected: {reason}"

    def to_dict(self) -> dict[str, Any]:
        """Plain data; ``load_term`` and ``claim_term`` are the two terms a
        ``TermMismatch`` compares (docs/rules.md §8.2)."""
        return {
            "accepted": self.accepted,
            "reason": self.reason,
            "rule": self.rule,
            "unfenced": self.unfenced,
            "load_term": self.load_term,
            "claim_term": self.claim_term,
            "current_term": self.current_term,
            "message": self.message,
        }


def _check_now(now_unix_ms: Any) -> int:
    return fence_int(now_unix_ms, "now_unix_ms", "clock")


def require_instance(value: Any, kind: type, name: str, *, optional: bool = False) -> None:
    """Refuse anything but a ``kind`` (or ``None`` when ``optional``), naming the field:
    a dict or a tuple where a claim belongs would otherwise fail deep inside a rule."""
    if value is None and optional:
        return
    if not isinstance(value, kind):
        expected = f"must be a {kind.__name__}" + (" or None" if optional else "")
        raise InvalidFenceInput(name, f"{expected}, not {type(value).__name__}",
                                value=value)


def _claim_shape_reason(claim: CoordinatorClaim, now_unix_ms: int) -> str | None:
    if not claim.model_id:
        return MISSING_MODEL_ID
    if not claim.package_ref:
        return MISSING_PACKAGE_REF
    if not claim.manifest_sha256:
        return MISSING_MANIFEST_SHA256
    if not claim.topology_id or not claim.run_id:
        return MISSING_TOPOLOGY_RUN
    if not claim.coordinator_id:
        return MISSING_COORDINATOR_ID
    if claim.coordinator_term == 0:
        return MISSING_TERM
    if not claim.participant_set_hash or not claim.topology_hash:
        return MISSING_HASHES
    if claim.lease_until_unix_ms <= now_unix_ms:
        return EXPIRED_LEASE
    return None


def _check_current_key(current: CoordinatorClaim | None, key: ClaimKey) -> None:
    if current is not None and current.key != key:
        raise InvalidFenceInput(
            "current",
            f"the stored claim is for {current.key!r}, not for the request's key {key!r}",
        )


def decide_claim(
    current: CoordinatorClaim | None, claim: CoordinatorClaim, now_unix_ms: int
) -> ClaimDecision:
    """Judge ``claim`` against the stored claim for its key, on the stage's clock."""
    require_instance(current, CoordinatorClaim, "current", optional=True)
    require_instance(claim, CoordinatorClaim, "claim")
    now_unix_ms = _check_now(now_unix_ms)
    _check_current_key(current, claim.key)

    def decided(accepted: bool, reason: str | None, rule: str, *,
                supersedes: int | None = None, against: CoordinatorClaim | None = current
                ) -> ClaimDecision:
        return ClaimDecision(accepted, reason, supersedes, against, claim, now_unix_ms, rule)

    shape = _claim_shape_reason(claim, now_unix_ms)
    if shape is not None:
        return decided(False, shape, RULE_SHAPE, against=None)
    if current is None:
        return decided(True, None, RULE_FIRST_CLAIM)
    if claim.coordinator_term < current.coordinator_term:
        return decided(False, STALE_TERM, RULE_STALE_TERM)
    if claim.coordinator_term == current.coordinator_term:
        if same_claim_epoch(current, claim):
            return decided(True, None, RULE_SAME_EPOCH)
        return decided(False, CONFLICTING_SAME_TERM, RULE_SAME_EPOCH)
    return decided(True, None, RULE_NEWER_TERM, supersedes=current.coordinator_term)


def decide_load(
    current: CoordinatorClaim | None, load: LoadClaimRef, now_unix_ms: int
) -> LoadDecision:
    """Judge ``load`` against the stored claim for its key, on the stage's clock."""
    require_instance(current, CoordinatorClaim, "current", optional=True)
    require_instance(load, LoadClaimRef, "load")
    now_unix_ms = _check_now(now_unix_ms)
    _check_current_key(current, load.key)

    def decided(reason: str | None, rule: str) -> LoadDecision:
        return LoadDecision(reason is None, reason, rule == RULE_UNFENCED, current, load,
                            now_unix_ms, rule)

    if load.is_unfenced:
        return decided(None, RULE_UNFENCED)
    if load.coordinator_term == 0:
        return decided(MISSING_TERM, RULE_FENCED_FIELDS)
    if not load.has_coordinator:
        return decided(MISSING_COORDINATOR_ID, RULE_FENCED_FIELDS)
    if current is None:
        return decided(MISSING_CLAIM, RULE_CLAIM_EXISTS)
    if load.coordinator_term != current.coordinator_term:
        return decided(TERM_MISMATCH, RULE_MATCH)
    if load.coordinator_id != current.coordinator_id:
        return decided(COORDINATOR_MISMATCH, RULE_MATCH)
    if load.topology_id != current.topology_id or load.run_id != current.run_id:
        return decided(TOPOLOGY_RUN_MISMATCH, RULE_MATCH)
    # A load at the lease instant itself is still inside the lease; a claim is not.
    if current.lease_until_unix_ms < now_unix_ms:
        return decided(EXPIRED_LEASE, RULE_LEASE)
    return decided(None, RULE_LEASE)


class ClaimFence:
    """One stage's fence: the accepted claim per key, updated only by accepted claims."""

    __slots__ = ("_claims",)

    def __init__(self, claims: Mapping[ClaimKey, CoordinatorClaim] | None = None) -> None:
        self._claims: dict[ClaimKey, CoordinatorClaim] = {}
        if claims is not None and not isinstance(claims, Mapping):
            raise InvalidFenceInput("claims", "must map claim keys to claims, not "
                                    f"{type(claims).__name__}", value=claims)
        for key, claim in (claims or {}).items():
            require_instance(claim, CoordinatorClaim, f"claims[{key!r}]")
            if claim.key != key:
                raise InvalidFenceInput("claims", f"claim stored under {key!r} is for "
                                        f"{claim.key!r}")
            self._claims[key] = claim

    def accept_claim(self, claim: CoordinatorClaim, now_unix_ms: int) -> ClaimDecision:
        require_instance(claim, CoordinatorClaim, "claim")
        decision = decide_claim(self._claims.get(claim.key), claim, now_unix_ms)
        if decision.accepted:
            self._claims[claim.key] = claim
        return decision

    def validate_load(self, load: LoadClaimRef, now_unix_ms: int) -> LoadDecision:
        require_instance(load, LoadClaimRef, "load")
        return decide_load(self._claims.get(load.key), load, now_unix_ms)

    def current_claim_for(
        self, model_id: str, package_ref: str, manifest_sha256: str
    ) -> CoordinatorClaim | None:
        return self._claims.get((model_id, package_ref, manifest_sha256))

    def claims(self) -> dict[ClaimKey, CoordinatorClaim]:
        return dict(self._claims)

    def __repr__(self) -> str:
        return f"ClaimFence({len(self._claims)} claim(s))"


def quorum_requirement(planned_stages: int) -> int:
    """Accepts a coordinator needs before loading: a majority of the planned stages (any
    integral type, at least 1: a split plans at least one stage)."""
    planned = integer(planned_stages, bad_input("planned_stages"), minimum=1,
                      maximum=MAX_FENCE_INT)
    return planned // 2 + 1
