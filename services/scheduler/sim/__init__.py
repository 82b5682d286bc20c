"""The trace simulator over the scheduling core: ``traces`` (the Alibaba traces), ``arrival`` (the FGD
paper's experiment), ``timed`` (creation and deletion times through full cycles) and ``report``. Called by
``fedsched simulate`` (``services.cli.simulate_run``)."""
