"""The trace simulator over the scheduling core: ``traces`` (the Alibaba traces), ``arrival`` (the FGD
paper's experiment), ``timed`` (creation and deletion times through full cycles), ``config`` (the timed
mode's configuration documents) and ``report``. Called by ``fedsched simulate`` (``services.cli.simulate_run``
and ``simulate_timed``)."""
