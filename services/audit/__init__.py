"""Audit: ``verify`` (every recorded cycle re-executed through the scheduler's core), ``whatif`` (the
recorded history under another policy), ``queries`` (a job's timeline and the export, from the archive;
the fleet at a moment, from the log). Called by ``fedsched audit ...`` and the demo."""
