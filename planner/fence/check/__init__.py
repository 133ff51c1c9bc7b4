"""An explicit-state model checker of the claim-fence rules.

It builds every state a small mesh can reach and judges properties of the fence on every
step, breadth first, so that each counterexample it finds is a shortest one. The stages
of the model judge with the real rules of :mod:`planner.fence`.

- :mod:`~planner.fence.check.configuration`: what one check explores, and the defaults;
- :mod:`~planner.fence.check.model`: the transition system (states, steps, the stage rules);
- :mod:`~planner.fence.check._properties`: what must hold and what is known not to;
- :mod:`~planner.fence.check.exploration`: the search, its state budget and progress;
- :mod:`~planner.fence.check.report`: results, counterexamples and the saved report.

``python -m planner.fence.check`` (``make fence-check``) checks the default configurations
and saves the report the fencing notebook reads.
"""

from planner.fence.check._properties import (
    KNOWN_TO_FAIL,
    KNOWN_TO_FAIL_NAMES,
    MUST_HOLD,
    MUST_HOLD_NAMES,
    PROPERTIES,
    PROPERTY_NAMES,
    Property,
    property_named,
)
from planner.fence.check.configuration import (
    DEFAULT_CONFIGS,
    CheckConfig,
    CheckConfigError,
    NamedConfig,
)
from planner.fence.check.exploration import (
    CheckProgress,
    StateBudgetExceeded,
    check,
    check_defaults,
    replay,
)
from planner.fence.check.report import (
    CheckReport,
    CheckResult,
    Counterexample,
    PropertyResult,
    StaleCheckResults,
    load_report,
    write_report,
)

__all__ = [
    "DEFAULT_CONFIGS",
    "KNOWN_TO_FAIL",
    "KNOWN_TO_FAIL_NAMES",
    "MUST_HOLD",
    "MUST_HOLD_NAMES",
    "PROPERTIES",
    "PROPERTY_NAMES",
    "CheckConfig",
    "CheckConfigError",
    "CheckProgress",
    "CheckReport",
    "CheckResult",
    "Counterexample",
    "NamedConfig",
    "Property",
    "PropertyResult",
    "StaleCheckResults",
    "StateBudgetExceeded",
    "check",
    "check_defaults",
    "load_report",
    "property_named",
    "replay",
    "write_report",
]
