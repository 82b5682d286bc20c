"""The federation scheduler: ``core`` (pure: the policy, the state folded from the log, ``decide`` and the
decision events), ``host`` (the service: follows the log, leads, appends cycles) and ``sim`` (the trace
simulator over the same core)."""
