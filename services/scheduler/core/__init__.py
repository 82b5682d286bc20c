"""The scheduler's pure core, one function reused by the live scheduler, ``audit verify``, ``audit
whatif``, the simulator and the benchmarks: ``policy`` (``schedule``: one cycle over a fleet snapshot),
``state`` (what the scheduler knows, folded from the log, and its snapshots), ``outputs`` (a cycle's
decisions as events, and the decision engine's name), ``decide`` (the recipe: snapshot, schedule,
decision events) and ``simulated_budgets`` (GPU-hour budgets in the simulator and ``audit whatif``,
counted as the state counts them, with their report). No I/O, clock, randomness or environment: an
import-linter contract keeps it so."""
