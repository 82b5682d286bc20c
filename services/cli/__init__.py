"""The ``fedsched`` command: ``main`` dispatches to one ``*_cmd`` module per command group, loaded by name
when used; the code only the CLI needs (``config``, ``jobfile``, ``quantities``, ``gov_render``,
``simulate_run``) lives here too."""
